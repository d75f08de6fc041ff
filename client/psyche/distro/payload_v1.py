"""Payload format v1: fixed-width indices (u8/u16/u32 by tile size) and one value per index.

Kept so that v1 payloads stay readable and can still be sent (`encode_payload(p, 1)`); the format
is described in docs/distro.md, "Payload format". The types and limits it shares with v2 live in
:mod:`psyche.distro.payload`, which dispatches on the version byte.
"""

from __future__ import annotations

import struct

import numpy as np
import torch

from psyche.distro.compress import DistroResult, chunk_shape, index_width, pack_signs
from psyche.distro.payload_types import (
    _CODE_DTYPES,
    _FLAG_1BIT,
    _FLOAT_CODES,
    _HEADER,
    _INDEX_CODES,
    _INDEX_NP,
    _INT_VIEWS,
    _TENSOR_TAIL,
    _U32_MAX,
    FORMAT_VERSION,
    MAGIC,
    VALUE_1BIT,
    Payload,
    PayloadError,
    PayloadSpec,
    TensorSpec,
    _check_range,
    check_result_shape,
    check_sendable,
    quantized_flag,
)

__all__ = ["decode_v1", "encode_v1"]


def encode_v1(payload: Payload) -> bytes:
    check_sendable(payload)
    _check_range("tensor count", len(payload.results), _U32_MAX)
    if payload.commitments is not None:
        raise PayloadError("per-sample commitments need payload format v2")
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
    check_result_shape(n, result)
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
    xshape = result.xshape
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


def decode_v1(data: bytes, expected: PayloadSpec) -> Payload:
    reader = _Reader(data)
    magic, version, step, start, end, nonce, flags, count = _HEADER.unpack(
        reader.take(_HEADER.size, "header")
    )
    if magic != MAGIC:
        raise PayloadError(f"bad magic {magic!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise PayloadError(f"unsupported format version {version}, expected {FORMAT_VERSION}")
    quantized = quantized_flag(flags, expected)
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
