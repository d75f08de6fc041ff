"""The probe of inner step 0 that a SparseLoCo result carries in its audit trailer.

A verifier's audit of a SparseLoCo result fetches two or three of the trainer's inner states
(12 bytes per parameter each) from the trainer's own host. A host that answers "not found" is
held to account, but one that stays silent or trickles cannot be told from a slow honest link,
so its audit is left unchecked — and a free rider could hide behind that. The probe is what a
verifier can check without the trainer's help: the result itself (which every client
downloads) carries, for a few positions of every parameter tensor, inner step 0's moments before
the step and the weights and moments after it. S_0's weights are the round's public start
weights, so a verifier computes step 0's gradient itself and replays AdamW on those positions
alone (``psyche.training.sparseloco_probe.replay_probe``).

The positions (:func:`probe_positions`) are public before training, drawn from the result's
step: that gives a cheater nothing, since the gradient at any position of a tensor needs the
forward pass over every sample and the backward pass down to that tensor, and every tensor,
the first layer's included, has probed positions — so a probe that holds needs inner step 0's
whole work. Layout, after the trailer's hashes (little-endian float32 throughout):

    step count before step 0, one per tensor (T values) |
    per tensor i, k_i values each of: m_0, v_0, w_1, m_1, v_1

with ``k_i = min(numel_i, PROBE_PER_TENSOR)``: :func:`probe_bytes` in all (6.8 kB for the tiny
model's 21 tensors). The values are not checked when decoded: a probe that does not hold (any
non-finite value included) fails its replay, which is the trainer's fault.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import blake3
import numpy as np

__all__ = [
    "PROBE_PER_TENSOR",
    "PROBE_ROWS",
    "Probe",
    "decode_probe",
    "encode_probe",
    "probe_bytes",
    "probe_positions",
]

PROBE_PER_TENSOR = 16
"""Positions probed in each parameter tensor (all of a smaller one). A ½ free rider's step 0
misses on every position by far more than rounding (its gradient is another one), so a few per
tensor do; what matters is that every tensor has some (see the module)."""
PROBE_ROWS = ("m0", "v0", "w1", "m1", "v1")
"""The values kept per position, in layout order."""
_DOMAIN = b"psyche-sparseloco-probe-v1"


def _counts(shapes: Sequence[Sequence[int]]) -> list[int]:
    return [min(math.prod(s), PROBE_PER_TENSOR) for s in shapes]


def probe_bytes(shapes: Sequence[Sequence[int]]) -> int:
    """The probe's exact size for parameters of ``shapes``."""
    return 4 * (len(shapes) + len(PROBE_ROWS) * sum(_counts(shapes)))


def probe_positions(shapes: Sequence[Sequence[int]], step: int) -> list[np.ndarray]:
    """The flat positions probed in each tensor in the round of ``step`` (int64, distinct, in
    drawing order): the same on every machine (BLAKE3 output, no library RNG whose algorithm
    could change between versions)."""
    out = []
    for i, (shape, k) in enumerate(zip(shapes, _counts(shapes), strict=True)):
        numel = math.prod(shape)
        if k == numel:
            out.append(np.arange(numel, dtype=np.int64))
            continue
        stream = blake3.blake3(_DOMAIN + step.to_bytes(8, "little") + i.to_bytes(4, "little"))
        seen: dict[int, None] = {}
        words = 0
        while len(seen) < k:  # a repeat is skipped: k ≪ numel, so this ends almost at once
            draw = stream.digest(length=8 * (words + 4 * k))[8 * words :]
            words += 4 * k
            for w in np.frombuffer(draw, dtype="<u8"):
                seen.setdefault(int(w) % numel)
                if len(seen) == k:
                    break
        out.append(np.fromiter(seen, dtype=np.int64, count=k))
    return out


@dataclass(frozen=True, slots=True)
class Probe:
    """Inner step 0 at the probed positions: the step count before it per tensor, and per
    tensor a ``(5, k_i)`` float32 array of :data:`PROBE_ROWS`."""

    counts: np.ndarray
    rows: tuple[np.ndarray, ...]


def encode_probe(probe: Probe) -> bytes:
    parts = [np.asarray(probe.counts, dtype="<f4").tobytes()]
    parts += [np.asarray(r, dtype="<f4").tobytes() for r in probe.rows]
    return b"".join(parts)


def decode_probe(data: bytes, shapes: Sequence[Sequence[int]]) -> Probe:
    """The probe in ``data`` (exactly :func:`probe_bytes` long: ``ValueError`` otherwise)."""
    if len(data) != probe_bytes(shapes):
        raise ValueError(f"probe has {len(data)} bytes, expected {probe_bytes(shapes)}")
    values = np.frombuffer(data, dtype="<f4")
    t = len(shapes)
    rows, at = [], t
    for k in _counts(shapes):
        n = len(PROBE_ROWS) * k
        rows.append(values[at : at + n].reshape(len(PROBE_ROWS), k))
        at += n
    return Probe(values[:t], tuple(rows))
