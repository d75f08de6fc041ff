"""Borsh encoding of the ``witness`` instruction arguments (our compact layout).

Why it exists before the Solana backend: a witness must fit one Solana transaction (1232 bytes)
together with its signature, accounts, blockhash and a compute-budget instruction. This module
fixes the argument layout the Rust program will declare, so the byte budget can be checked now:

``proof`` (position u64, index u64, witness u8) · ``participant_bloom`` and ``broadcast_bloom``
(seed u64 + 48 × u64 each) · ``metadata`` (step u32, tokens_per_sec f32, bandwidth_per_sec f32,
loss f32, efficiency f32, evals: u32 length + (task u8, value f32) × ≤ 8).

Non-finite floats are sent as 0.0 because borsh data with NaN cannot be compared or replayed.
"""

from __future__ import annotations

import math
import struct

from psyche.coordinator.types import MAX_EVALS, Witness, WitnessMetadata

ANCHOR_DISCRIMINATOR_LEN = 8


def _f32(x: float) -> bytes:
    return struct.pack("<f", x if math.isfinite(x) else 0.0)


def encode_witness_metadata(m: WitnessMetadata) -> bytes:
    if len(m.evals) > MAX_EVALS:
        raise ValueError(f"at most {MAX_EVALS} evals fit in a witness, got {len(m.evals)}")
    out = bytearray(struct.pack("<I", m.step))
    for x in (m.tokens_per_sec, m.bandwidth_per_sec, m.loss, m.efficiency):
        out += _f32(x)
    out += struct.pack("<I", len(m.evals))
    for e in m.evals:
        out += struct.pack("<B", e.task) + _f32(e.value)
    return bytes(out)


def encode_witness_args(w: Witness, m: WitnessMetadata) -> bytes:
    """Instruction data after the 8-byte Anchor discriminator."""
    p = w.proof
    return (
        struct.pack("<QQB", p.position, p.index, int(p.witness))
        + w.participant_bloom.to_bytes()
        + w.broadcast_bloom.to_bytes()
        + encode_witness_metadata(m)
    )
