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

from psyche.distro.compress import DistroResult, chunk_shape, index_width, pack_signs, totalk_of
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
"""The v1 layout's version byte (this module's `_encode_v1`/`_decode_v1`)."""
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


def encode_payload(payload: Payload, version: int = PAYLOAD_VERSION) -> bytes:
    """Serialize `payload` to its canonical bytes in format `version` (default: the one this
    client sends); raises `PayloadError` if it cannot be sent."""
    if version == 1:
        return _encode_v1(payload)
    if version == 2:
        from psyche.distro.payload_v2 import encode_v2  # v2 builds on this module's types

        return encode_v2(payload)
    raise ValueError(f"payload format version must be one of {_KNOWN_VERSIONS}, got {version}")


def _encode_v1(payload: Payload) -> bytes:
    _check_range("step", payload.step, _U32_MAX)
    _check_range("batch_start", payload.batch_start, _U64_MAX)
    _check_range("batch_end", payload.batch_end, _U64_MAX)
    _check_range("trainer_nonce", payload.trainer_nonce, _U32_MAX)
    if payload.batch_start > payload.batch_end:
        raise PayloadError(f"batch start {payload.batch_start} is after end {payload.batch_end}")
    _check_range("tensor count", len(payload.results), _U32_MAX)
    flags = _FLAG_1BIT if payload.quantized else 0
    parts = [
        _HEADER.pack(
            MAGIC,
            FORMAT_VERSION,
            payload.step,
            payload.batch_start,
            payload.batch_end,
            payload.trainer_nonce,
            flags,
            len(payload.results),
        )
    ]
    for n, result in enumerate(payload.results):
        parts.extend(_encode_tensor(n, result, payload.quantized))
    return b"".join(parts)


def _encode_tensor(n: int, result: DistroResult, quantized: bool) -> list[bytes]:
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
    idx = result.idx.detach().to("cpu", torch.int64)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= result.totalk):
        raise PayloadError(f"tensor {n}: an index is outside [0, {result.totalk})")
    if _repeats(idx):
        raise PayloadError(f"tensor {n}: an index repeats within a tile")
    index_code = _INDEX_CODES[index_width(result.totalk)]
    if quantized:
        value_code = VALUE_1BIT
        values = pack_signs(result.val).numpy().tobytes()
    else:
        if result.val.dtype not in _FLOAT_CODES:
            raise PayloadError(
                f"tensor {n}: values must be bf16, f16 or f32, not {result.val.dtype}"
            )
        value_code = _FLOAT_CODES[result.val.dtype]
        int_dtype, np_dtype = _INT_VIEWS[value_code]
        if not bool(torch.isfinite(result.val).all()):
            raise PayloadError(f"tensor {n}: values include NaN or infinity")
        raw = result.val.detach().to("cpu").contiguous().view(int_dtype).numpy()
        values = raw.astype(np_dtype, copy=False).tobytes()
    head = struct.pack(f"<B{len(xshape)}H", len(xshape), *xshape)
    tail = _TENSOR_TAIL.pack(result.totalk, result.k, index_code, value_code)
    indices = idx.numpy().astype(_INDEX_NP[index_code]).tobytes()
    return [head, tail, indices, values]


def _repeats(idx: torch.Tensor) -> bool:
    if idx.shape[-1] < 2:
        return False
    ordered = idx.sort(dim=-1).values
    return bool((ordered[..., 1:] == ordered[..., :-1]).any())


class _Reader:
    """Bounds-checked cursor over the input; every read names what it was reading."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, size: int, what: str) -> bytes:
        end = self.offset + size
        if end > len(self.data):
            raise PayloadError(
                f"truncated: {what} needs {size} bytes at offset {self.offset}, "
                f"only {len(self.data) - self.offset} left"
            )
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk


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
    return _decode_v1(data, expected)


def _decode_v1(data: bytes, expected: PayloadSpec) -> Payload:
    reader = _Reader(data)
    magic, version, step, start, end, nonce, flags, count = _HEADER.unpack(
        reader.take(_HEADER.size, "header")
    )
    if magic != MAGIC:
        raise PayloadError(f"bad magic {magic!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise PayloadError(f"unsupported format version {version}, expected {FORMAT_VERSION}")
    if flags & ~_FLAG_1BIT:
        raise PayloadError(f"unknown flag bits {flags:#04x}")
    quantized = bool(flags & _FLAG_1BIT)
    if quantized != expected.quantized:
        raise PayloadError(f"quantize flag is {quantized}, the run uses {expected.quantized}")
    if start > end:
        raise PayloadError(f"batch start {start} is after batch end {end}")
    if count != len(expected.tensors):
        raise PayloadError(f"tensor count {count}, expected {len(expected.tensors)}")
    results = tuple(_decode_tensor(reader, spec) for spec in expected.tensors)
    if reader.offset != len(data):
        raise PayloadError(f"{len(data) - reader.offset} trailing bytes after the last tensor")
    return Payload(step, start, end, nonce, quantized, results)


def _decode_tensor(reader: _Reader, spec: TensorSpec) -> DistroResult:
    where = f"tensor {spec.name!r}"
    (ndim,) = reader.take(1, f"{where} ndim")
    if ndim != len(spec.xshape):
        raise PayloadError(f"{where}: {ndim} dims, expected {len(spec.xshape)}")
    xshape = struct.unpack(f"<{ndim}H", reader.take(2 * ndim, f"{where} xshape"))
    if xshape != spec.xshape:
        raise PayloadError(f"{where}: xshape {xshape}, expected {spec.xshape}")
    totalk, k, index_code, value_code = _TENSOR_TAIL.unpack(
        reader.take(_TENSOR_TAIL.size, f"{where} header")
    )
    if totalk != spec.totalk:
        raise PayloadError(f"{where}: totalk {totalk}, expected {spec.totalk}")
    if k != spec.k:
        raise PayloadError(f"{where}: k {k}, expected {spec.k}")
    if index_code != spec.index_code:
        raise PayloadError(f"{where}: index width code {index_code}, expected {spec.index_code}")
    if value_code != spec.value_code:
        raise PayloadError(f"{where}: value dtype code {value_code}, expected {spec.value_code}")
    shape = (*chunk_shape(spec.xshape), spec.k)
    raw_idx = reader.take(spec.index_bytes, f"{where} indices")
    idx_np = np.frombuffer(raw_idx, dtype=_INDEX_NP[index_code]).astype(np.int64)
    if idx_np.size and int(idx_np.max()) >= totalk:
        raise PayloadError(f"{where}: index {int(idx_np.max())} is not below totalk {totalk}")
    idx = torch.from_numpy(idx_np).reshape(shape)
    if _repeats(idx):
        raise PayloadError(f"{where}: an index repeats within a tile")
    raw_val = reader.take(spec.value_bytes, f"{where} values")
    return DistroResult(idx, _decode_values(raw_val, spec, shape, where), spec.xshape, totalk)


def _decode_values(
    raw: bytes, spec: TensorSpec, shape: tuple[int, ...], where: str
) -> torch.Tensor:
    if spec.value_code == VALUE_1BIT:
        packed = np.frombuffer(raw, dtype=np.uint8)
        bits = np.unpackbits(packed, bitorder="little")
        if bits[spec.n_values :].any():
            raise PayloadError(f"{where}: 1-bit padding bits are not zero")
        signs = 1.0 - 2.0 * bits[: spec.n_values].astype(np.float32)
        return torch.from_numpy(signs).reshape(shape)
    _, wire_dtype = _INT_VIEWS[spec.value_code]
    # A native-endian, writable copy: torch cannot view a read-only or byte-swapped buffer.
    ints = np.frombuffer(raw, dtype=wire_dtype).astype(wire_dtype.newbyteorder("="))
    val = torch.from_numpy(ints).view(_CODE_DTYPES[spec.value_code]).reshape(shape)
    if not bool(torch.isfinite(val).all()):
        raise PayloadError(f"{where}: values include NaN or infinity")
    return val


def payload_hash(step: int, batch_start: int, batch_end: int, payload_bytes: bytes) -> bytes:
    """32-byte commitment: SHA-256(domain, step u32 BE, start u64 BE, end u64 BE, payload bytes)."""
    _check_range("step", step, _U32_MAX)
    _check_range("batch_start", batch_start, _U64_MAX)
    _check_range("batch_end", batch_end, _U64_MAX)
    digest = hashlib.sha256(HASH_DOMAIN)
    digest.update(struct.pack(">IQQ", step, batch_start, batch_end))
    digest.update(payload_bytes)
    return digest.digest()
