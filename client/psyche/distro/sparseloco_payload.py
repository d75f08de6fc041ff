"""SparseLoCo's settings and wire format: chunked top-k of a pseudo-gradient, 1 or 2 value bits.

The math around it (error feedback, quantization, the outer step) is `psyche.distro.sparseloco`;
docs/distro.md, "SparseLoCo", is the contract. This module holds only what both the sender and
every receiver must agree on: the chunk layout that follows from the parameter shapes and the
settings, and the one canonical byte string of a round's compressed pseudo-gradient.

Chunking. Each tensor is flattened (row-major) and cut into chunks of `topk_chunk` elements; the
last chunk keeps the remainder (nothing is padded). A chunk of `n` elements keeps
`min(topk, n)` entries. A tensor therefore has up to two *groups* of equal chunks (the full ones,
then the short last one), and each group is coded at once.

Layout (integers little-endian), written as a validator first, like `payload.py`:

    header   magic b"PSL" | version u8 | step u64 | trainer_nonce u32 | value_bits u8 |
             topk_chunk u32 | topk u32 | tensors u32 | layout u64
    scales   for every tensor, group and chunk: `value_bits` bf16 scales as raw u16
             (1 bit: s; 2 bits: lo, hi)
    bits     one run, packed 8 per byte LSB first, zero-padded to a byte: for every tensor and
             group: the Elias–Fano code of each chunk's sorted indices (`elias_fano.py`), then
             one sign bit per kept entry (1 = negative), then, with 2 bits, one magnitude bit
             per entry (1 = hi)

A kept entry's value is `(−1)^sign · s` (1 bit) or `(−1)^sign · (hi if mag else lo)` (2 bits).
The size is a function of the shapes and settings alone (`max_payload_bytes`), and a payload of
any other length is refused before parsing. Canonical form, checked on decode, so one set of
values has exactly one byte string: indices strictly increasing (Elias–Fano enforces it); every
scale a finite, non-negative bf16 without the sign bit; with 2 bits `lo ≤ hi`, and a chunk uses
its `hi` level iff `hi > lo`; an entry whose level is 0 has sign 0; padding bits are 0; header
fields equal what the shapes and settings say (`layout` is the first 8 bytes of SHA-256 over the
shapes, so a payload made for another model of the same sizes is refused too). Every failure is
a `PayloadError`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from psyche.distro.audit_trailer import AuditCommitments
from psyche.distro.elias_fano import EliasFano, EliasFanoError
from psyche.distro.payload import PayloadError

__all__ = [
    "MAGIC",
    "VERSION",
    "ChunkGroup",
    "SparseLoCoPayload",
    "SparseLoCoSettings",
    "SparseTensor",
    "decode_payload",
    "encode_payload",
    "max_payload_bytes",
    "tensor_groups",
]

MAGIC = b"PSL"
VERSION = 1
_HEADER = struct.Struct("<3sBQIBIIIQ")
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
_BF16_SIGN = 0x8000
_BF16_EXP = 0x7F80

Shape = Sequence[int]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class SparseLoCoSettings:
    """The run-wide knobs of SparseLoCo's math (C30 builds them from the run config)."""

    topk_chunk: int
    """Elements per chunk of a flattened tensor (the last chunk of a tensor may be shorter)."""
    topk: int
    """Entries kept per chunk (clamped to the chunk's length)."""
    value_bits: int
    """1: sign and one scale per chunk; 2: sign, magnitude bit and two scales per chunk."""
    error_decay: float
    """β of the error feedback `e ← β·e + Δ` (0 < β ≤ 1)."""
    outer_momentum: float = 0.0
    """m of the outer step `v ← m·v + mean`, `θ ← θ − α·v` (0 ≤ m < 1; 0: no buffer)."""

    def __post_init__(self) -> None:
        if not 1 <= self.topk_chunk <= _U32_MAX:
            raise ValueError(f"topk_chunk must be in [1, {_U32_MAX}], got {self.topk_chunk}")
        if not 1 <= self.topk <= self.topk_chunk:
            raise ValueError(f"topk must be in [1, topk_chunk], got {self.topk}")
        if self.value_bits not in (1, 2):
            raise ValueError(f"value_bits must be 1 or 2, got {self.value_bits}")
        if not 0.0 < self.error_decay <= 1.0:
            raise ValueError(f"error_decay must be in (0, 1], got {self.error_decay}")
        if not 0.0 <= self.outer_momentum < 1.0:
            raise ValueError(f"outer_momentum must be in [0, 1), got {self.outer_momentum}")


@dataclass(frozen=True, slots=True)
class ChunkGroup:
    """`chunks` equal chunks of `n` elements starting at element `start`, `k` kept in each."""

    start: int
    chunks: int
    n: int
    k: int

    @property
    def code(self) -> EliasFano:
        return EliasFano.for_tile(self.n, self.k)

    @property
    def entries(self) -> int:
        return self.chunks * self.k


def tensor_groups(numel: int, settings: SparseLoCoSettings) -> tuple[ChunkGroup, ...]:
    """The chunk groups of a tensor of `numel` elements (empty for an empty tensor)."""
    c, full = settings.topk_chunk, numel // settings.topk_chunk
    out = []
    if full:
        out.append(ChunkGroup(0, full, c, settings.topk))
    rest = numel - full * c
    if rest:
        out.append(ChunkGroup(full * c, 1, rest, min(settings.topk, rest)))
    return tuple(out)


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def layout_digest(shapes: Sequence[Shape]) -> int:
    """The header's `layout`: a digest of the ordered shapes."""
    text = ";".join(",".join(str(int(d)) for d in s) for s in shapes).encode()
    return int.from_bytes(
        hashlib.sha256(b"psyche-sparseloco-layout:" + text).digest()[:8], "little"
    )


def _group_bits(g: ChunkGroup, value_bits: int) -> int:
    return g.chunks * (g.code.tile_bits + value_bits * g.k)


def _sizes(shapes: Sequence[Shape], settings: SparseLoCoSettings) -> tuple[int, int]:
    """(scale count, bit count) of a payload for these shapes."""
    scales = bits = 0
    for shape in shapes:
        for g in tensor_groups(_numel(shape), settings):
            scales += g.chunks * settings.value_bits
            bits += _group_bits(g, settings.value_bits)
    return scales, bits


def max_payload_bytes(shapes: Sequence[Shape], settings: SparseLoCoSettings) -> int:
    """The exact length of every valid payload for these shapes and settings."""
    scales, bits = _sizes(shapes, settings)
    return _HEADER.size + 2 * scales + (bits + 7) // 8


@dataclass(frozen=True, slots=True)
class SparseTensor:
    """One tensor's kept entries: per group, sorted local indices `(chunks, k)`, sign bits
    `(chunks, k)`, magnitude bits `(chunks, k)` (all zero with 1 bit) and bf16 scale bits
    `(chunks, value_bits)` as int64 numpy arrays."""

    indices: tuple[Ints, ...]
    signs: tuple[Ints, ...]
    mags: tuple[Ints, ...]
    scales: tuple[Ints, ...]

    def flat(self, groups: Sequence[ChunkGroup]) -> tuple[torch.Tensor, torch.Tensor]:
        """(flat indices into the tensor, float32 values): what the apply adds."""
        idx, vals = [], []
        for g, i, s, m, sc in zip(
            groups, self.indices, self.signs, self.mags, self.scales, strict=True
        ):
            base = g.start + g.n * np.arange(g.chunks, dtype=np.int64)[:, None]
            idx.append((i + base).reshape(-1))
            levels = _bf16_to_f32(sc)
            level = np.take_along_axis(levels, m, axis=1) if levels.shape[1] > 1 else levels
            vals.append(np.where(s == 1, -level, level).astype(np.float32).reshape(-1))
        if not idx:
            return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.float32)
        return torch.from_numpy(np.concatenate(idx)), torch.from_numpy(np.concatenate(vals))


@dataclass(frozen=True, slots=True)
class SparseLoCoPayload:
    """A decoded (or about to be encoded) round contribution of one trainer."""

    step: int
    trainer_nonce: int
    tensors: tuple[SparseTensor, ...]
    audit: AuditCommitments | None = None
    """The inner-state commitments of its audit trailer, in a run that verifies
    (``psyche.distro.audit_trailer``; the result format appends and parses it)."""


def _bf16_to_f32(bits: Ints) -> npt.NDArray[np.float32]:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode_payload(
    payload: SparseLoCoPayload, shapes: Sequence[Shape], settings: SparseLoCoSettings
) -> bytes:
    """The canonical bytes of `payload` (built by `sparseloco.encode_round`, already canonical)."""
    if not 0 <= payload.step <= _U64_MAX or not 0 <= payload.trainer_nonce <= _U32_MAX:
        raise PayloadError("step must fit u64 and trainer_nonce u32")
    if len(payload.tensors) != len(shapes):
        raise PayloadError(f"{len(payload.tensors)} tensors for {len(shapes)} shapes")
    header = _HEADER.pack(
        MAGIC, VERSION, payload.step, payload.trainer_nonce, settings.value_bits,
        settings.topk_chunk, settings.topk, len(shapes), layout_digest(shapes),
    )  # fmt: skip
    scales: list[Ints] = []
    bits: list[npt.NDArray[np.uint8]] = []
    for shape, t in zip(shapes, payload.tensors, strict=True):
        for g, i, s, m, sc in zip(
            tensor_groups(_numel(shape), settings), t.indices, t.signs, t.mags, t.scales,
            strict=True,
        ):  # fmt: skip
            scales.append(sc.reshape(-1))
            bits.append(g.code.encode(i))
            bits.append(s.astype(np.uint8).reshape(-1))
            if settings.value_bits == 2:
                bits.append(m.astype(np.uint8).reshape(-1))
    scale_bytes = np.concatenate(scales).astype("<u2").tobytes() if scales else b""
    bit_bytes = np.packbits(np.concatenate(bits), bitorder="little").tobytes() if bits else b""
    return header + scale_bytes + bit_bytes


def _check_scales(sc: Ints, where: str) -> None:
    if bool((sc & _BF16_SIGN).any()):
        raise PayloadError(f"{where}: a scale has its sign bit set")
    if bool(((sc & _BF16_EXP) == _BF16_EXP).any()):
        raise PayloadError(f"{where}: a scale is not finite")


def _check_levels(sc: Ints, s: Ints, m: Ints, value_bits: int, where: str) -> None:
    """Canonical-form rules between a group's scales, signs and magnitude bits."""
    if value_bits == 2:
        lo, hi = sc[:, 0], sc[:, 1]  # non-negative bf16 bits order like their values
        if bool((lo > hi).any()):
            raise PayloadError(f"{where}: a chunk has lo > hi")
        if not bool((m.any(axis=1) == (hi > lo)).all()):
            raise PayloadError(f"{where}: a chunk uses its hi level iff hi > lo, not here")
        level_zero = (lo == 0)[:, None] & (m == 0)
    else:
        level_zero = np.broadcast_to((sc[:, 0] == 0)[:, None], s.shape)
    if bool((level_zero & (s == 1)).any()):
        raise PayloadError(f"{where}: a zero value carries a sign")


def decode_payload(
    data: bytes, shapes: Sequence[Shape], settings: SparseLoCoSettings
) -> SparseLoCoPayload:
    """Parse and validate one payload; raise `PayloadError` on anything but the canonical form."""
    expected = max_payload_bytes(shapes, settings)
    if len(data) != expected:
        raise PayloadError(f"payload has {len(data)} bytes, expected exactly {expected}")
    magic, version, step, nonce, vbits, chunk, topk, n_tensors, layout = _HEADER.unpack_from(data)
    want = (MAGIC, VERSION, settings.value_bits, settings.topk_chunk, settings.topk)
    if (magic, version, vbits, chunk, topk) != want:
        raise PayloadError(
            f"header (magic, version, value_bits, topk_chunk, topk) is "
            f"{(magic, version, vbits, chunk, topk)}, expected {want}"
        )
    if n_tensors != len(shapes) or layout != layout_digest(shapes):
        raise PayloadError(f"header says {n_tensors} tensors of another layout; model differs")
    n_scales, n_bits = _sizes(shapes, settings)
    off = _HEADER.size
    all_scales = np.frombuffer(data, dtype="<u2", count=n_scales, offset=off).astype(np.int64)
    raw = np.frombuffer(data, dtype=np.uint8, offset=off + 2 * n_scales)
    all_bits = np.unpackbits(raw, bitorder="little")
    if bool(all_bits[n_bits:].any()):
        raise PayloadError("padding bits are not zero")
    vb = settings.value_bits
    tensors, s_off, b_off = [], 0, 0
    for t_i, shape in enumerate(shapes):
        idx, signs, mags, scales = [], [], [], []
        for g in tensor_groups(_numel(shape), settings):
            where = f"tensor {t_i}, chunks of {g.n}"
            sc = all_scales[s_off : s_off + g.chunks * vb].reshape(g.chunks, vb)
            s_off += g.chunks * vb
            _check_scales(sc, where)
            code = g.code
            try:
                i = code.decode(all_bits[b_off : b_off + g.chunks * code.tile_bits], g.chunks)
            except EliasFanoError as e:
                raise PayloadError(f"{where}: indices: {e}") from None
            b_off += g.chunks * code.tile_bits
            s = all_bits[b_off : b_off + g.entries].reshape(g.chunks, g.k).astype(np.int64)
            b_off += g.entries
            if vb == 2:
                m = all_bits[b_off : b_off + g.entries].reshape(g.chunks, g.k).astype(np.int64)
                b_off += g.entries
            else:
                m = np.zeros_like(s)
            _check_levels(sc, s, m, vb, where)
            idx.append(i)
            signs.append(s)
            mags.append(m)
            scales.append(sc)
        tensors.append(SparseTensor(tuple(idx), tuple(signs), tuple(mags), tuple(scales)))
    return SparseLoCoPayload(step, nonce, tuple(tensors))
