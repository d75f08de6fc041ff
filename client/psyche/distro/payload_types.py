"""The DisTrO payload's types and the rules every format shares (docs/distro.md, "Payload
format"): the header constants, `PayloadError`, the layout a model and config imply
(`TensorSpec`, `PayloadSpec`), the decoded `Payload` and the checks both formats' encoders and
decoders apply. The formats themselves are `payload_v1` and `payload_v2`, and `payload` is the
entry point that dispatches between them; they build on this module, which imports neither, so
the format modules and the entry point form no import circle.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from psyche.distro.compress import DistroResult, chunk_shape, index_width, totalk_of
from psyche.distro.config import DistroConfig
from psyche.distro.dct import encoded_shape
from psyche.distro.sample_commit import SampleCommitments

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
    commitments: bool = False
    """Whether every payload must carry per-sample commitments (v2 only; a run that verifies,
    `psyche.distro.payload_commit`), and a payload without them is refused; when False, one
    with them is."""
    _max_bytes: int = field(default=-1, init=False, repr=False, compare=False)
    """`max_bytes`, once computed: every download and decode asks for it (24,384 times in a
    64-client simulated round, 0.2 ms each)."""

    def __post_init__(self) -> None:
        if self.version not in _KNOWN_VERSIONS:
            raise ValueError(f"payload format version must be one of {_KNOWN_VERSIONS}")
        if self.commitments and self.version == 1:
            raise ValueError("per-sample commitments need payload format v2")

    @classmethod
    def from_model(
        cls,
        named_shapes: Mapping[str, Sequence[int]] | Iterable[tuple[str, Sequence[int]]],
        config: DistroConfig,
        value_dtype: torch.dtype = torch.bfloat16,
        version: int = PAYLOAD_VERSION,
        commitments: bool = False,
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
        return cls(
            tensors=tensors,
            quantized=config.quantize_1bit,
            version=version,
            commitments=commitments,
        )

    @property
    def max_bytes(self) -> int:
        """Hard upper bound on a payload's size in this spec's format (v1: the exact size; v2:
        the size with the header's variable-length integers at their widest)."""
        if self._max_bytes < 0:
            if self.version == 1:
                bound = _HEADER.size + sum(t.wire_bytes for t in self.tensors)
            else:
                bound = _SIZE_BOUNDS[self.version](self)
            object.__setattr__(self, "_max_bytes", bound)  # frozen: a cache, not a change
        return self._max_bytes


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
    commitments: SampleCommitments | None = None
    """Per-micro-batch gradient fingerprints (`psyche.distro.sample_commit`); v2 only, and
    None in a payload without them."""
    flat: FlatResults | None = field(default=None, compare=False, repr=False)
    """Set by the v2 decoder: every tensor's indices and values in one array each, of which
    `results`' tensors are views (for the copy check's sketch, which reads them all)."""


@dataclass(frozen=True, slots=True, eq=False)
class FlatLayout:
    """Per tensor: the index tensor's shape and `totalk`; one object per spec (hashed by
    identity, so that a cache keyed by it costs no hash of the tuple)."""

    shapes: tuple[tuple[tuple[int, ...], int], ...]


@dataclass(frozen=True, slots=True, eq=False)
class FlatResults:
    """A decoded payload's tensors in two flat arrays, tensor after tensor in spec order."""

    results: tuple[DistroResult, ...]
    """The results these arrays back: a payload whose `results` is another tuple (built with
    `dataclasses.replace`) does not use them."""
    idx: np.ndarray
    """int64 indices."""
    val: np.ndarray
    """The values as the decoder checked them (finite): float32 (±1 in 1-bit mode), or the
    int16 bits of bf16/f16 values (a value's sign is the int's, and it is > 0 iff the int is)."""
    layout: FlatLayout


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


_SIZE_BOUNDS: dict[int, Callable[[PayloadSpec], int]] = {}
"""Format version → its size bound, for the formats whose bound is their own business (v2)."""


def register_size_bound(version: int, bound: Callable[[PayloadSpec], int]) -> None:
    """Called once by a format module at import: `PayloadSpec.max_bytes` of its version."""
    _SIZE_BOUNDS[version] = bound
