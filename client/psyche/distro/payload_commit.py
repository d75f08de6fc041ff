"""The per-sample commitments' section of a v2 payload (`psyche.distro.sample_commit`).

A run that verifies results (``verification_percent`` > 0) has every trainer append it, and its
`PayloadSpec` has ``commitments`` set: the decoder then requires the section (flag bit 1 of the
v2 header) and refuses it otherwise, so a run has one payload layout and a result without its
evidence is malformed. Layout, after the v2 body (little-endian):

    group u16 (≥ 1) | groups u16 (1 … MAX_GROUPS) | lookahead 32 bytes |
    groups × PROJECTIONS f16 (finite)

The section's size follows from ``groups``, so the payload still has exactly one valid byte
string; its bound, `SECTION_MAX_BYTES`, is added to the spec's `max_bytes`.
"""

from __future__ import annotations

import struct

import numpy as np
import torch

from psyche.distro.payload_types import PayloadError
from psyche.distro.sample_commit import MAX_GROUPS, PROJECTIONS, SampleCommitments

__all__ = ["FLAG_COMMITMENTS", "SECTION_MAX_BYTES", "decode_section", "encode_section"]

FLAG_COMMITMENTS = 0x02
_HEAD = struct.Struct("<HH32s")
SECTION_MAX_BYTES = _HEAD.size + MAX_GROUPS * PROJECTIONS * 2


def encode_section(c: SampleCommitments) -> bytes:
    """The section's bytes; `PayloadError` if it cannot be sent."""
    groups = int(c.values.shape[0]) if c.values.ndim == 2 else 0
    if c.values.ndim != 2 or c.values.shape[1] != PROJECTIONS or not 1 <= groups <= MAX_GROUPS:
        raise PayloadError(f"commitments must be [1…{MAX_GROUPS}, {PROJECTIONS}] values")
    if not 1 <= c.group <= 0xFFFF or len(c.lookahead) != 32:
        raise PayloadError("commitments: group must be 1…65535 and lookahead 32 bytes")
    half = c.values.detach().to("cpu", torch.float16)
    if not bool(torch.isfinite(half).all()):
        raise PayloadError("commitments include NaN or infinity (or overflow f16)")
    raw = half.contiguous().view(torch.int16).numpy().astype("<i2", copy=False).tobytes()
    return _HEAD.pack(c.group, groups, c.lookahead) + raw


def decode_section(data: bytes, offset: int) -> SampleCommitments:
    """The section that must fill ``data[offset:]`` exactly; any defect is a `PayloadError`."""
    if len(data) - offset < _HEAD.size:
        raise PayloadError(f"truncated: commitments need {_HEAD.size} bytes at offset {offset}")
    group, groups, lookahead = _HEAD.unpack_from(data, offset)
    if group < 1 or not 1 <= groups <= MAX_GROUPS:
        raise PayloadError(f"commitments: group {group}, groups {groups} out of range")
    size = groups * PROJECTIONS * 2
    start = offset + _HEAD.size
    if len(data) - start != size:
        raise PayloadError(f"commitments: {len(data) - start} value bytes, expected {size}")
    ints = np.frombuffer(data, "<i2", groups * PROJECTIONS, start).astype(np.int16)
    values = torch.from_numpy(ints).view(torch.float16).float().reshape(groups, PROJECTIONS)
    if not bool(torch.isfinite(values).all()):
        raise PayloadError("commitments include NaN or infinity")
    return SampleCommitments(group, values, bytes(lookahead))
