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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from psyche.distro.compress import DistroResult, chunk_shape, index_width, totalk_of
from psyche.distro.config import DistroConfig
from psyche.distro.dct import encoded_shape

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

MAGIC = b"PDT"
FORMAT_VERSION = 1
"""The v1 layout's version byte (:mod:`psyche.distro.payload_v1`)."""
PAYLOAD_VERSION = 2
"""The format this client version sends and expects (v2, `psyche.distro.payload_v2`). It is tied to
the client's protocol version rather than to a run-config field, so the account layout does not
change: every client of a run runs the same version (docs/protocol.md, "Payload formats")."""
_KNOWN_VERSIONS = (1, 2)
HASH_DOMAIN = b"psyche-distro-v1"

_HEADER = struct.Struct("<3sBIQQIBI")
_TENSOR_TAIL = struct.Struct("<IIBB")
_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
_FLAG_1BIT = 0x01

VALUE_BF16, VALUE_F16, VALUE_F32, VALUE_1BIT = 0, 1, 2, 3
_FLOAT_CODES: dict[torch.dtype, int] = {
    torch.bfloat16: VALUE_BF16,
    torch.float16: VALUE_F16,
    torch.float32: VALUE_F32,
}
_CODE_DTYPES = {code: dtype for dtype, code in _FLOAT_CODES.items()}
# Same-width integer views: numpy has no bf16, so values travel through these.
_INT_VIEWS: dict[int, tuple[torch.dtype, np.dtype[np.signedinteger]]] = {
    VALUE_BF16: (torch.int16, np.dtype("<i2")),
    VALUE_F16: (torch.int16, np.dtype("<i2")),
    VALUE_F32: (torch.int32, np.dtype("<i4")),
}
_INDEX_CODES = {1: 0, 2: 1, 4: 2}
_INDEX_NP = {0: "<u1", 1: "<u2", 2: "<u4"}


class PayloadError(ValueError):
    """A payload that is malformed or does not match the expected model/config."""


def value_code_for(dtype: torch.dtype) -> int:
    """Wire value code of a float dtype (bf16, f16 or f32)."""
    if dtype not in _FLOAT_CODES:
        raise ValueError(f"values can travel as bf16, f16 or f32, not {dtype}")
    return _FLOAT_CODES[dtype]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """What one parameter's entry must look like on the wire."""

    name: str
    shape: tuple[int, ...]
    xshape: tuple[int, ...]
    totalk: int
    k: int
    index_code: int
    value_code: int

    @classmethod
    def for_parameter(
        cls, name: str, shape: Sequence[int], config: DistroConfig, value_dtype: torch.dtype
    ) -> TensorSpec:
        """The entry for a parameter of `shape` under `config` (values in `value_dtype`)."""
        xshape = encoded_shape(tuple(int(d) for d in shape), config.compression_chunk)
        if len(xshape) > 255 or any(d > _U16_MAX for d in xshape):
            raise ValueError(
                f"parameter {name!r} encodes to {xshape}: the wire holds at most 255 dims of at "
                f"most {_U16_MAX} each; lower compression_chunk or reshape the parameter"
            )
        totalk = totalk_of(xshape)
        value_code = VALUE_1BIT if config.quantize_1bit else value_code_for(value_dtype)
        return cls(
            name=name,
            shape=tuple(int(d) for d in shape),
            xshape=xshape,
            totalk=totalk,
            k=min(max(config.compression_topk, 1), totalk),
            index_code=_INDEX_CODES[index_width(totalk)],
            value_code=value_code,
        )

    @property
    def n_values(self) -> int:
        """Number of (index, value) pairs: tiles × k."""
        return int(np.prod(chunk_shape(self.xshape), dtype=np.int64)) * self.k

    @property
    def index_bytes(self) -> int:
        return self.n_values << self.index_code

    @property
    def value_bytes(self) -> int:
        if self.value_code == VALUE_1BIT:
            return (self.n_values + 7) // 8
        return self.n_values * (4 if self.value_code == VALUE_F32 else 2)

    @property
    def wire_bytes(self) -> int:
        """Size of this tensor's entry, header included."""
        return 1 + 2 * len(self.xshape) + _TENSOR_TAIL.size + self.index_bytes + self.value_bytes


@dataclass(frozen=True, slots=True)
class PayloadSpec:
    """The exact payload layout a model and config imply; decoding checks against it."""

    tensors: tuple[TensorSpec, ...]
    quantized: bool
    version: int = PAYLOAD_VERSION
    """The format peers must send; `decode_payload` refuses the other one."""

    def __post_init__(self) -> None:
        if self.version not in _KNOWN_VERSIONS:
            raise ValueError(f"payload format version must be one of {_KNOWN_VERSIONS}")

    @classmethod
    def from_model(
        cls,
        named_shapes: Mapping[str, Sequence[int]] | Iterable[tuple[str, Sequence[int]]],
        config: DistroConfig,
        value_dtype: torch.dtype = torch.bfloat16,
        version: int = PAYLOAD_VERSION,
    ) -> PayloadSpec:
        """Spec for parameters `named_shapes` (ordered by name here), values sent as `value_dtype`.

        `value_dtype` is the parameter dtype (bf16 for real runs); it is ignored in 1-bit mode.
        """
        items = list(named_shapes.items() if isinstance(named_shapes, Mapping) else named_shapes)
        names = [name for name, _ in items]
        if len(set(names)) != len(names):
            raise ValueError("parameter names must be unique")
        tensors = tuple(
            TensorSpec.for_parameter(name, shape, config, value_dtype)
            for name, shape in sorted(items, key=lambda item: item[0])
        )
        return cls(tensors=tensors, quantized=config.quantize_1bit, version=version)

    @property
    def max_bytes(self) -> int:
        """Hard upper bound on a payload's size in this spec's format (v1: the exact size; v2:
        the size with the header's variable-length integers at their widest)."""
        if self.version == 1:
            return _HEADER.size + sum(t.wire_bytes for t in self.tensors)
        from psyche.distro.payload_v2 import max_bytes_v2  # v2 builds on this module's types

        return max_bytes_v2(self)


@dataclass(frozen=True, slots=True)
class Payload:
    """One trainer's result for one round: header fields and one `DistroResult` per parameter.

    As produced by `Distro.generate`, `results` hold the unquantized values (the client keeps this
    for its next `generate`); `encode_payload` reduces them to signs when `quantized` is set. As
    produced by `decode_payload` in 1-bit mode, values are ±1 in float32.
    """

    step: int
    batch_start: int
    batch_end: int
    trainer_nonce: int
    quantized: bool
    results: tuple[DistroResult, ...]


def _check_range(what: str, value: int, limit: int) -> None:
    if not 0 <= value <= limit:
        raise PayloadError(f"{what} = {value} is outside [0, {limit}]")


def check_sendable(payload: Payload) -> None:
    """The header fields every format carries fit their wire ranges (any format's encoder)."""
    _check_range("step", payload.step, _U32_MAX)
    _check_range("batch_start", payload.batch_start, _U64_MAX)
    _check_range("batch_end", payload.batch_end, _U64_MAX)
    _check_range("trainer_nonce", payload.trainer_nonce, _U32_MAX)
    if payload.batch_start > payload.batch_end:
        raise PayloadError(f"batch start {payload.batch_start} is after end {payload.batch_end}")


def check_result_shape(n: int, result: DistroResult) -> None:
    """Tensor ``n``'s result has a shape a spec can hold and idx/val shaped for it."""
    xshape = result.xshape
    if not 2 <= len(xshape) <= 255 or any(not 1 <= d <= _U16_MAX for d in xshape):
        raise PayloadError(
            f"tensor {n}: xshape {xshape} does not fit the wire (u8 count, u16 dims)"
        )
    if totalk_of(xshape) != result.totalk:
        raise PayloadError(f"tensor {n}: totalk {result.totalk} does not match xshape {xshape}")
    expected = (*chunk_shape(xshape), result.k)
    if tuple(result.idx.shape) != expected or tuple(result.val.shape) != expected:
        raise PayloadError(
            f"tensor {n}: idx {tuple(result.idx.shape)} / val {tuple(result.val.shape)}, "
            f"expected {expected}"
        )


def quantized_flag(flags: int, expected: PayloadSpec) -> bool:
    """The quantize bit of a received header's flags, which must be the run's (any format)."""
    if flags & ~_FLAG_1BIT:
        raise PayloadError(f"unknown flag bits {flags:#04x}")
    quantized = bool(flags & _FLAG_1BIT)
    if quantized != expected.quantized:
        raise PayloadError(f"quantize flag is {quantized}, the run uses {expected.quantized}")
    return quantized


def encode_payload(payload: Payload, version: int = PAYLOAD_VERSION) -> bytes:
    """Serialize `payload` to its canonical bytes in format `version` (default: the one this
    client sends); raises `PayloadError` if it cannot be sent."""
    if version == 1:
        from psyche.distro.payload_v1 import encode_v1  # v1 builds on this module's types

        return encode_v1(payload)
    if version == 2:
        from psyche.distro.payload_v2 import encode_v2  # v2 builds on this module's types

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
        from psyche.distro.payload_v2 import decode_v2  # v2 builds on this module's types

        return decode_v2(data, expected)
    from psyche.distro.payload_v1 import decode_v1  # v1 builds on this module's types

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
