"""Payload format v2: Elias–Fano indices, packed signs, a compact header (docs/distro.md).

v1 (`psyche.distro.payload`) spends 8, 16 or 32 bits per index plus a per-tensor header that only
repeats what the decoder already knows from `PayloadSpec`. v2 keeps v1's validator-first rules
(every field bounded and checked, lengths from the spec, one valid byte string per result) and
sends only what the spec does not determine:

    header   magic b"PDT" | version u8 (2) | flags u8 (bit 0: 1-bit values) | layout u32 |
             step, batch_start, batch_end − batch_start, trainer_nonce (LEB128, minimal)
    bits     for each tensor in spec order: Elias–Fano low parts, high parts (`EliasFano`), then
             in 1-bit mode one sign bit per index (1 = negative); packed LSB first, the last
             byte zero-padded
    values   (not 1-bit) for each tensor, tiles·k little-endian bf16/f16/f32 values

Within a tile, indices are sent in increasing order and values follow them, so a decoded result
lists the same (index, value) pairs as the one sent, ordered by index instead of by magnitude;
aggregation scatters distinct indices, so the order changes no bit of `apply`. `layout` is the
first 4 bytes of a SHA-256 over the encoded shapes, k, value codes and the 1-bit flag: shapes no
longer travel per tensor, and a peer with another model or config fails on this field instead
of at some later length check.

The body has a fixed size for a spec; only the header's integers vary (by at most 25 bytes), so
`max_bytes` is a tight bound and a payload of another length is refused after the header.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from psyche.distro.compress import DistroResult, chunk_shape
from psyche.distro.elias_fano import EliasFano, EliasFanoError
from psyche.distro.payload_commit import (
    FLAG_COMMITMENTS,
    SECTION_MAX_BYTES,
    decode_section,
    encode_section,
)
from psyche.distro.payload_types import (
    _CODE_DTYPES,
    _FLOAT_CODES,
    _INT_VIEWS,
    _U32_MAX,
    _U64_MAX,
    MAGIC,
    VALUE_1BIT,
    VALUE_BF16,
    VALUE_F16,
    VALUE_F32,
    FlatLayout,
    FlatResults,
    Payload,
    PayloadError,
    PayloadSpec,
    TensorSpec,
    check_result_shape,
    check_sendable,
    quantized_flag,
    register_size_bound,
)

__all__ = ["VERSION", "decode_v2", "encode_v2", "layout_digest", "max_bytes_v2"]

VERSION = 2
_FLAG_1BIT = 0x01
_FIXED = struct.Struct("<3sBBI")
_LAYOUT_DOMAIN = b"psyche-distro-layout-v2"
# LEB128 bytes of the widest header: step and nonce u32 (5 each); start + length ≤ 2^64 − 1, so
# at most one of them reaches 2^63 and needs 10 bytes, the other then takes at most 9.
_VARINT_MAX_BYTES = 5 + 19 + 5


def layout_digest(entries: Sequence[tuple[tuple[int, ...], int, int]], quantized: bool) -> int:
    """u32 fingerprint of (xshape, k, value code) per tensor and the 1-bit flag."""
    return _layout_digest(tuple(entries), quantized)


@functools.lru_cache(maxsize=32)
def _layout_digest(entries: tuple[tuple[tuple[int, ...], int, int], ...], quantized: bool) -> int:
    # Cached: a client encodes the same layout every round.
    digest = hashlib.sha256(_LAYOUT_DOMAIN)
    digest.update(struct.pack("<BI", int(quantized), len(entries)))
    for xshape, k, value_code in entries:
        digest.update(struct.pack(f"<B{len(xshape)}IIB", len(xshape), *xshape, k, value_code))
    return int.from_bytes(digest.digest()[:4], "little")


def _tiles(xshape: Sequence[int]) -> int:
    return int(np.prod(chunk_shape(xshape), dtype=np.int64))


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a spec implies for v2, worked out once per spec (decoding runs once per peer)."""

    digest: int
    codes: tuple[EliasFano, ...]
    bits: tuple[int, ...]
    """Per tensor: index bits plus, in 1-bit mode, sign bits."""
    value_bytes: tuple[int, ...]
    fast: _Fast | None
    """The whole-payload decode (None: a spec without tensors)."""

    @property
    def n_bits(self) -> int:
        return sum(self.bits)

    @property
    def body_bytes(self) -> int:
        return (self.n_bits + 7) // 8 + sum(self.value_bytes)


@functools.lru_cache(maxsize=32)
def _plan(spec: PayloadSpec) -> _Plan:
    codes = tuple(EliasFano.for_tile(t.totalk, t.k) for t in spec.tensors)
    bits, value_bytes = [], []
    for t, code in zip(spec.tensors, codes, strict=True):
        one_bit = t.value_code == VALUE_1BIT
        bits.append(_tiles(t.xshape) * (code.tile_bits + (t.k if one_bit else 0)))
        value_bytes.append(0 if one_bit else t.n_values * (4 if t.value_code == VALUE_F32 else 2))
    digest = layout_digest([(t.xshape, t.k, t.value_code) for t in spec.tensors], spec.quantized)
    fast = _fast_plan(spec, codes, bits) if spec.tensors else None
    return _Plan(digest, codes, tuple(bits), tuple(value_bytes), fast)


@dataclass(frozen=True, slots=True)
class _Group:
    """The tensors of one Elias–Fano code, decoded in one call."""

    code: EliasFano
    tiles: int
    parts: tuple[tuple[int, int], ...]
    """Bit ranges: every tensor's low part, then every tensor's high part (as `decode` reads
    one tensor's: all low parts, then all high parts)."""


@dataclass(frozen=True, slots=True)
class _Fast:
    """A spec's whole-payload decode: a few numpy calls per distinct code, not per tensor."""

    groups: tuple[_Group, ...]
    pieces: tuple[tuple[int, int, int], ...]
    """Per tensor: its group and its range in the group's decoded indices."""
    signs: tuple[tuple[int, int], ...]
    """1-bit mode: per tensor, the bit range of its signs."""
    tensors: tuple[TensorSpec, ...]
    spans: tuple[tuple[int, int, tuple[int, ...]], ...]
    """Per tensor: its range in the flat arrays and its index and value shape."""
    value_code: int | None
    """The one value code of every tensor (None: mixed, decoded per tensor)."""
    dtype: torch.dtype
    """The values' torch dtype."""
    layout: FlatLayout


def _fast_plan(spec: PayloadSpec, codes: tuple[EliasFano, ...], bits: list[int]) -> _Fast:
    by_code: dict[EliasFano, list[int]] = {}
    for n, code in enumerate(codes):
        by_code.setdefault(code, []).append(n)
    starts = np.cumsum([0, *bits]).tolist()
    groups, pieces, signs = [], [(0, 0, 0)] * len(codes), []
    for g, (code, members) in enumerate(by_code.items()):
        low, high, row = [], [], 0
        for n in members:
            tiles = _tiles(spec.tensors[n].xshape)
            split = starts[n] + tiles * code.k * code.low_bits
            low.append((starts[n], split))
            high.append((split, starts[n] + tiles * code.tile_bits))
            pieces[n] = (g, row, row + tiles * code.k)
            row += tiles * code.k
        groups.append(_Group(code, row // code.k, tuple(low + high)))
    for n, t in enumerate(spec.tensors):
        signs.append((starts[n] + _tiles(t.xshape) * codes[n].tile_bits, starts[n + 1]))
    value_codes = {t.value_code for t in spec.tensors}
    value_code = value_codes.pop() if len(value_codes) == 1 else None
    shapes = tuple((*chunk_shape(t.xshape), t.k) for t in spec.tensors)
    ends = np.cumsum([t.n_values for t in spec.tensors]).tolist()
    return _Fast(
        tuple(groups),
        tuple(pieces),
        tuple(signs),
        spec.tensors,
        tuple(zip([0, *ends[:-1]], ends, shapes, strict=True)),
        value_code,
        _CODE_DTYPES.get(value_code, torch.float32) if value_code is not None else torch.float32,
        FlatLayout(tuple((shape, t.totalk) for shape, t in zip(shapes, spec.tensors, strict=True))),
    )


def body_bytes(spec: PayloadSpec) -> int:
    """Bytes after the header: the packed bit section and the raw values."""
    return _plan(spec).body_bytes


def max_bytes_v2(spec: PayloadSpec) -> int:
    """Upper bound on a v2 payload's size under `spec` (header integers at their widest)."""
    section = SECTION_MAX_BYTES if spec.commitments else 0
    return _FIXED.size + _VARINT_MAX_BYTES + body_bytes(spec) + section


register_size_bound(VERSION, max_bytes_v2)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encode_v2(payload: Payload) -> bytes:
    """Serialize `payload` as v2 (raises `PayloadError` if it cannot be sent)."""
    check_sendable(payload)
    bits: list[np.ndarray] = []
    values: list[bytes] = []
    entries = []
    for n, result in enumerate(payload.results):
        value_code, tensor_bits, raw = _encode_tensor(n, result, payload.quantized)
        entries.append((result.xshape, result.k, value_code))
        bits.append(tensor_bits)
        values.append(raw)
    flags = _FLAG_1BIT if payload.quantized else 0
    section = b""
    if payload.commitments is not None:
        flags |= FLAG_COMMITMENTS
        section = encode_section(payload.commitments)
    head = _FIXED.pack(MAGIC, VERSION, flags, layout_digest(entries, payload.quantized))
    ints = (payload.step, payload.batch_start, payload.batch_end - payload.batch_start)
    head += b"".join(_varint(v) for v in (*ints, payload.trainer_nonce))
    packed = np.packbits(np.concatenate(bits) if bits else np.zeros(0, np.uint8), bitorder="little")
    return b"".join([head, packed.tobytes(), *values, section])


def _encode_tensor(n: int, result: DistroResult, quantized: bool) -> tuple[int, np.ndarray, bytes]:
    check_result_shape(n, result)
    k = result.k
    idx = result.idx.detach().to("cpu", torch.int64).reshape(-1, k)
    order = idx.argsort(dim=-1)
    ordered = idx.gather(-1, order).numpy()
    if ordered.size and (
        int(ordered[:, 0].min()) < 0 or int(ordered[:, -1].max()) >= result.totalk
    ):
        raise PayloadError(f"tensor {n}: an index is outside [0, {result.totalk})")
    if k > 1 and bool((ordered[:, 1:] == ordered[:, :-1]).any()):
        raise PayloadError(f"tensor {n}: an index repeats within a tile")
    val = result.val.detach().to("cpu").reshape(-1, k).gather(-1, order)
    index_bits = EliasFano.for_tile(result.totalk, k).encode(ordered)
    if quantized:
        signs = torch.signbit(val).to(torch.uint8).reshape(-1).numpy()
        return VALUE_1BIT, np.concatenate([index_bits, signs]), b""
    if val.dtype not in _FLOAT_CODES:
        raise PayloadError(f"tensor {n}: values must be bf16, f16 or f32, not {val.dtype}")
    if not bool(torch.isfinite(val).all()):
        raise PayloadError(f"tensor {n}: values include NaN or infinity")
    value_code = _FLOAT_CODES[val.dtype]
    int_dtype, np_dtype = _INT_VIEWS[value_code]
    raw = val.contiguous().view(int_dtype).numpy().astype(np_dtype, copy=False).tobytes()
    return value_code, index_bits, raw


def _read_varint(data: bytes, offset: int, limit: int, what: str) -> tuple[int, int]:
    value = 0
    for i in range(10):
        if offset + i >= len(data):
            raise PayloadError(f"truncated: {what} runs past the end at offset {offset + i}")
        byte = data[offset + i]
        value |= (byte & 0x7F) << (7 * i)
        if value > limit:
            raise PayloadError(f"{what} exceeds {limit} at offset {offset}")
        if not byte & 0x80:
            if byte == 0 and i > 0:
                raise PayloadError(f"{what} at offset {offset} is not minimally encoded")
            return value, offset + i + 1
    raise PayloadError(f"{what} at offset {offset} is longer than 10 bytes")


def decode_v2(data: bytes, expected: PayloadSpec) -> Payload:
    """Parse and validate a v2 payload against `expected`; any defect raises `PayloadError`.

    The caller has checked the type and `len(data) ≤ max_bytes_v2(expected)`.
    """
    if len(data) < _FIXED.size:
        raise PayloadError(f"truncated: header needs {_FIXED.size} bytes, got {len(data)}")
    magic, version, flags, layout = _FIXED.unpack_from(data)
    if magic != MAGIC:
        raise PayloadError(f"bad magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise PayloadError(f"format version {version}, expected {VERSION}")
    has_section = bool(flags & FLAG_COMMITMENTS)
    if has_section != expected.commitments:
        raise PayloadError(
            f"per-sample commitments {'present' if has_section else 'missing'}; the run "
            f"{'requires' if expected.commitments else 'does not take'} them"
        )
    quantized = quantized_flag(flags & ~FLAG_COMMITMENTS, expected)
    plan = _plan(expected)
    if layout != plan.digest:
        raise PayloadError(
            f"layout digest {layout:#010x} does not match this model and config "
            f"({plan.digest:#010x}): shapes, top-k or value dtype differ"
        )
    offset = _FIXED.size
    step, offset = _read_varint(data, offset, _U32_MAX, "step")
    start, offset = _read_varint(data, offset, _U64_MAX, "batch_start")
    length, offset = _read_varint(data, offset, _U64_MAX - start, "batch length")
    nonce, offset = _read_varint(data, offset, _U32_MAX, "trainer_nonce")
    body = plan.body_bytes
    section = None
    if has_section:
        if len(data) - offset < body:
            raise PayloadError(f"truncated: body needs {body} bytes after offset {offset}")
        section = decode_section(data, offset + body)
        data = data[: offset + body]
    if len(data) - offset != body:
        raise PayloadError(
            f"body has {len(data) - offset} bytes after offset {offset}, expected {body}"
        )
    n_bits = plan.n_bits
    bit_bytes = (n_bits + 7) // 8
    bits = np.unpackbits(np.frombuffer(data, np.uint8, bit_bytes, offset), bitorder="little")
    if bits[n_bits:].any():
        raise PayloadError("padding bits after the bit section are not zero")
    at = offset + bit_bytes
    fast = _decode_fast(plan.fast, bits, data, at) if plan.fast is not None else None
    if fast is not None:
        results, flat = fast
        return Payload(step, start, start + length, nonce, quantized, results, section, flat)
    # No tensors, or a defect: tensor by tensor, which names the defect.
    results = _decode_each(expected, plan, bits, data, at)
    return Payload(step, start, start + length, nonce, quantized, results, section)


def _decode_each(
    expected: PayloadSpec, plan: _Plan, bits: np.ndarray, data: bytes, byte_at: int
) -> tuple[DistroResult, ...]:
    bit_at, results = 0, []
    for spec, code, size, value_size in zip(
        expected.tensors, plan.codes, plan.bits, plan.value_bytes, strict=True
    ):
        raw = data[byte_at : byte_at + value_size]
        results.append(_decode_tensor(spec, code, bits[bit_at : bit_at + size], raw))
        bit_at, byte_at = bit_at + size, byte_at + value_size
    return tuple(results)


def _decode_fast(
    fast: _Fast, bits: np.ndarray, data: bytes, at: int
) -> tuple[tuple[DistroResult, ...], FlatResults] | None:
    """Every tensor at once: one Elias–Fano decode per code, one array of indices and one of
    values, the tensors views of them. None if anything is refused (the caller then decodes
    tensor by tensor, as before, to name the defect): it accepts exactly what that accepts,
    with the same bits."""
    decoded = []
    for g in fast.groups:
        chunk = np.concatenate([bits[a:b] for a, b in g.parts]) if g.parts else bits[:0]
        try:
            decoded.append(g.code.decode(chunk, g.tiles).reshape(-1))
        except EliasFanoError:
            return None
    flat_idx = np.concatenate([decoded[g][a:b] for g, a, b in fast.pieces])
    if fast.value_code == VALUE_1BIT:
        signs = np.concatenate([bits[a:b] for a, b in fast.signs])
        flat_val = 1.0 - 2.0 * signs.astype(np.float32)
    elif fast.value_code is not None:
        _, wire_dtype = _INT_VIEWS[fast.value_code]
        count = fast.spans[-1][1]
        ints = np.frombuffer(data, wire_dtype, count, at).astype(wire_dtype.newbyteorder("="))
        if not bool(torch.isfinite(torch.from_numpy(ints).view(fast.dtype)).all()):
            return None
        flat_val = ints.view(np.float32) if fast.value_code == VALUE_F32 else ints
    else:
        return None
    # One torch tensor per numpy view: cheaper than splitting a torch tensor and viewing.
    half = fast.value_code in (VALUE_BF16, VALUE_F16)  # int16 bits on the numpy side
    results = tuple(
        DistroResult(
            torch.from_numpy(flat_idx[a:b].reshape(shape)),
            torch.from_numpy(flat_val[a:b].reshape(shape)).view(fast.dtype)
            if half
            else torch.from_numpy(flat_val[a:b].reshape(shape)),
            t.xshape,
            t.totalk,
        )
        for (a, b, shape), t in zip(fast.spans, fast.tensors, strict=True)
    )
    return results, FlatResults(results, flat_idx, flat_val, fast.layout)


def _decode_tensor(spec: TensorSpec, code: EliasFano, bits: np.ndarray, raw: bytes) -> DistroResult:
    where = f"tensor {spec.name!r}"
    tiles, k = _tiles(spec.xshape), spec.k
    index_bits = tiles * code.tile_bits
    try:
        idx_np = code.decode(bits[:index_bits], tiles)
    except EliasFanoError as e:
        raise PayloadError(f"{where}: {e}") from e
    shape = (*chunk_shape(spec.xshape), k)
    idx = torch.from_numpy(idx_np).reshape(shape)
    if spec.value_code == VALUE_1BIT:
        signs = 1.0 - 2.0 * bits[index_bits:].astype(np.float32)
        return DistroResult(idx, torch.from_numpy(signs).reshape(shape), spec.xshape, spec.totalk)
    _, wire_dtype = _INT_VIEWS[spec.value_code]
    # A native-endian, writable copy: torch cannot view a read-only or byte-swapped buffer.
    ints = np.frombuffer(raw, dtype=wire_dtype).astype(wire_dtype.newbyteorder("="))
    val = torch.from_numpy(ints).view(_CODE_DTYPES[spec.value_code]).reshape(shape)
    if not bool(torch.isfinite(val).all()):
        raise PayloadError(f"{where}: values include NaN or infinity")
    return DistroResult(idx, val, spec.xshape, spec.totalk)
