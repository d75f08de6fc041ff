"""The DisTrO payload: a compact, versioned, strictly validated binary format, and its commitment.

A payload is what one trainer sends per round: a small header and, for every parameter in name
order, the top-k indices and values of its encoded residual. Two formats share this module's
types (`Payload`, `PayloadSpec`) and entry points (`encode_payload`, `decode_payload`): v2
(`psyche.distro.payload_v2`, Elias–Fano indices, what clients send; docs/protocol.md, "Payload
formats") and v1, laid out below, which stays readable. `PayloadSpec.version` says which one a
decoder accepts. It arrives from untrusted peers, so each decoder is written as a validator first
(v1's rules here; v2 keeps them with a fixed-length body instead of fixed-length fields):

- The expected layout is fully determined by the model's parameter shapes and the run's
  `DistroConfig` (`PayloadSpec`), so every field is checked for equality with what it must be, not
  merely for plausibility. A valid payload therefore has exactly `PayloadSpec.max_bytes` bytes, and
  anything larger is refused before a byte is parsed (a transport can cap downloads at that size).
- Lengths are derived from checked header fields, never trusted from the wire; the parser only
  slices the input it was given, so a hostile payload cannot make it allocate more than the spec
  allows. Every failure is a `PayloadError` naming the field, the tensor and the offset.
- Indices must be `< totalk` and distinct within a tile (a repeated index would give one peer two
  votes in the mean); values must be finite; 1-bit padding bits must be zero. Together these make
  the encoding canonical: one result has exactly one valid byte string.

Pickle and `torch.save` are deliberately not used: both execute or trust attacker-controlled
structure. No framework serializer is used either, so the format is specified here alone.

v1 layout (all integers little-endian; indices and values are raw little-endian arrays):

    header   magic b"PDT" | version u8 | step u32 | batch_start u64 | batch_end u64 |
             trainer_nonce u32 | flags u8 (bit 0: 1-bit values; other bits 0) | tensors u32
    tensor   ndim u8 | xshape u16 × ndim | totalk u32 | k u32 | index code u8 | value code u8 |
             indices (grid·k × index width) | values (grid·k × 2 or 4 bytes, or ⌈grid·k/8⌉ 1-bit)

The commitment (`payload_hash`) is SHA-256 over a domain tag, the step and batch (big-endian, as
in the reference) and the whole canonical payload, so unlike the reference it also covers shapes,
`totalk`, the trainer nonce and the format version (docs/protocol.md, "Commitments and payload
hashing", and "Known flaws of the reference", flaw 19).
"""

from __future__ import annotations

import hashlib
import struct

from psyche.distro.payload_types import (
    _KNOWN_VERSIONS,
    _U32_MAX,
    _U64_MAX,
    FORMAT_VERSION,
    HASH_DOMAIN,
    MAGIC,
    PAYLOAD_VERSION,
    Payload,
    PayloadError,
    PayloadSpec,
    TensorSpec,
    _check_range,
    value_code_for,
)
from psyche.distro.payload_v1 import decode_v1, encode_v1
from psyche.distro.payload_v2 import decode_v2, encode_v2

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "PAYLOAD_VERSION",
    "Payload",
    "PayloadError",
    "PayloadSpec",
    "TensorSpec",
    "decode_payload",
    "encode_payload",
    "payload_hash",
    "value_code_for",
]


def encode_payload(payload: Payload, version: int = PAYLOAD_VERSION) -> bytes:
    """Serialize `payload` to its canonical bytes in format `version` (default: the one this
    client sends); raises `PayloadError` if it cannot be sent."""
    if version == 1:
        return encode_v1(payload)
    if version == 2:
        return encode_v2(payload)
    raise ValueError(f"payload format version must be one of {_KNOWN_VERSIONS}, got {version}")


def decode_payload(data: bytes, expected: PayloadSpec) -> Payload:
    """Parse and validate `data` against `expected` (its layout and format version); any defect
    raises `PayloadError`."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise PayloadError(f"payload must be bytes, got {type(data).__name__}")
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > expected.max_bytes:
        # Checked before copying or parsing anything: the cheap bound a transport can also apply.
        raise PayloadError(f"oversized: {size} bytes > maximum {expected.max_bytes}")
    data = bytes(data)
    if len(data) >= 4 and data[:3] == MAGIC and data[3] != expected.version:
        raise PayloadError(f"format version {data[3]}, the run expects {expected.version}")
    if expected.version == 2:
        return decode_v2(data, expected)
    return decode_v1(data, expected)


def payload_hash(step: int, batch_start: int, batch_end: int, payload_bytes: bytes) -> bytes:
    """32-byte commitment: SHA-256(domain, step u32 BE, start u64 BE, end u64 BE, payload bytes)."""
    _check_range("step", step, _U32_MAX)
    _check_range("batch_start", batch_start, _U64_MAX)
    _check_range("batch_end", batch_end, _U64_MAX)
    digest = hashlib.sha256(HASH_DOMAIN)
    digest.update(struct.pack(">IQQ", step, batch_start, batch_end))
    digest.update(payload_bytes)
    return digest.digest()
