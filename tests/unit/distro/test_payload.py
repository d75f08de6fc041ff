"""Payload format v1 (still readable): round trips, every rejection path, the commitment hash,
and fuzzing. Format v2 is in test_payload_v2.py."""

from __future__ import annotations

import contextlib
import hashlib
import math
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psyche.distro import (
    DistroConfig,
    DistroResult,
    Payload,
    PayloadError,
    PayloadSpec,
    compress,
    decode_payload,
    encode,
    payload_hash,
    sign_values,
)
from psyche.distro import encode_payload as encode_any_version

SHAPES = {"b.weight": (4, 6), "a.bias": (8,)}
HEADER = 33  # magic 3 + version 1 + step 4 + start 8 + end 8 + nonce 4 + flags 1 + count 4


def encode_payload(payload: Payload) -> bytes:
    return encode_any_version(payload, version=1)


def v1_spec(
    shapes: dict[str, tuple[int, ...]], cfg: DistroConfig, value_dtype: torch.dtype = torch.bfloat16
) -> PayloadSpec:
    return PayloadSpec.from_model(shapes, cfg, value_dtype=value_dtype, version=1)


def config(quantize: bool = False, topk: int = 2, chunk: int = 4) -> DistroConfig:
    return DistroConfig(
        compression_decay=0.999,
        compression_topk=topk,
        compression_chunk=chunk,
        quantize_1bit=quantize,
    )


def make_payload(
    shapes: dict[str, tuple[int, ...]],
    cfg: DistroConfig,
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
) -> Payload:
    generator = torch.Generator().manual_seed(seed)
    results = []
    for name in sorted(shapes):
        x = torch.randn(shapes[name], generator=generator)
        r = compress(encode(x, cfg.compression_chunk), cfg.compression_topk)
        results.append(DistroResult(r.idx, r.val.to(dtype), r.xshape, r.totalk))
    return Payload(7, 100, 131, 3, cfg.quantize_1bit, tuple(results))


def valid(quantize: bool = False) -> tuple[bytes, PayloadSpec]:
    cfg = config(quantize)
    return encode_payload(make_payload(SHAPES, cfg)), v1_spec(SHAPES, cfg)


def patched(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


# First tensor is "a.bias": xshape (2, 4), totalk 4, k 2 → 4 u8 indices, then 4 values.
A_NDIM = HEADER
A_DIMS = A_NDIM + 1
A_TOTALK = A_DIMS + 4
A_K = A_TOTALK + 4
A_INDEX_CODE = A_K + 4
A_VALUE_CODE = A_INDEX_CODE + 1
A_INDICES = A_VALUE_CODE + 1
A_VALUES = A_INDICES + 4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_round_trip_unquantized(dtype: torch.dtype) -> None:
    cfg = config()
    payload = make_payload(SHAPES, cfg, dtype)
    spec = v1_spec(SHAPES, cfg, value_dtype=dtype)
    data = encode_payload(payload)
    assert len(data) == spec.max_bytes
    back = decode_payload(data, spec)
    assert (back.step, back.batch_start, back.batch_end, back.trainer_nonce) == (7, 100, 131, 3)
    for got, sent in zip(back.results, payload.results, strict=True):
        assert torch.equal(got.idx, sent.idx)
        assert got.val.dtype == dtype
        assert torch.equal(got.val, sent.val)
        assert (got.xshape, got.totalk) == (sent.xshape, sent.totalk)
    assert encode_payload(back) == data


def test_round_trip_1bit_keeps_signs() -> None:
    cfg = config(quantize=True)
    payload = make_payload(SHAPES, cfg)
    back = decode_payload(encode_payload(payload), v1_spec(SHAPES, cfg))
    assert back.quantized
    for got, sent in zip(back.results, payload.results, strict=True):
        assert torch.equal(got.idx, sent.idx)
        assert torch.equal(got.val, sign_values(sent.val, torch.float32))
        assert torch.equal(torch.sign(got.val), torch.sign(sent.val.float()))


def test_1bit_and_unquantized_payloads_share_indices() -> None:
    plain = make_payload(SHAPES, config(False))
    signs = make_payload(SHAPES, config(True))
    spec_plain, spec_signs = (v1_spec(SHAPES, config(q)) for q in (False, True))
    a = decode_payload(encode_payload(plain), spec_plain)
    b = decode_payload(encode_payload(signs), spec_signs)
    for x, y in zip(a.results, b.results, strict=True):
        assert torch.equal(x.idx, y.idx)
        assert torch.equal(torch.sign(x.val.float()), y.val)
    assert spec_signs.max_bytes < spec_plain.max_bytes


def test_truncated_at_every_length() -> None:
    data, spec = valid()
    for size in range(len(data)):
        with pytest.raises(PayloadError):
            decode_payload(data[:size], spec)


def _reject(data: bytes, spec: PayloadSpec, match: str) -> None:
    with pytest.raises(PayloadError, match=match):
        decode_payload(data, spec)


@pytest.mark.parametrize(
    ("offset", "new", "match"),
    [
        (0, b"PDX", "magic"),
        (3, b"\x02", "version"),
        (HEADER - 5, b"\x02", "flag bits"),
        (HEADER - 5, b"\x01", "quantize flag"),
        (HEADER - 4, struct.pack("<I", 3), "tensor count"),
        (4 + 4, struct.pack("<Q", 10**6), "batch start"),
        (A_NDIM, b"\x03", "dims"),
        (A_DIMS, struct.pack("<H", 4), "xshape"),
        (A_TOTALK, struct.pack("<I", 8), "totalk"),
        (A_K, struct.pack("<I", 1), "k 1"),
        (A_INDEX_CODE, b"\x01", "index width"),
        (A_VALUE_CODE, b"\x02", "value dtype"),
        (A_INDICES, b"\x04", "not below totalk"),
        (A_INDICES, b"\xc8", "not below totalk"),
    ],
)
def test_bad_fields_are_rejected(offset: int, new: bytes, match: str) -> None:
    data, spec = valid()
    _reject(patched(data, offset, new), spec, match)


def test_repeated_index_is_rejected() -> None:
    data, spec = valid()
    first = data[A_INDICES : A_INDICES + 1]
    _reject(patched(data, A_INDICES + 1, first), spec, "repeats")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_rejected(bad: float) -> None:
    cfg = config()
    data = encode_payload(make_payload(SHAPES, cfg, torch.float32))
    spec = v1_spec(SHAPES, cfg, value_dtype=torch.float32)
    _reject(patched(data, A_VALUES, struct.pack("<f", bad)), spec, "NaN or infinity")
    bf16_data, bf16_spec = valid()
    nan_bf16 = torch.tensor([bad], dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()
    _reject(patched(bf16_data, A_VALUES, nan_bf16), bf16_spec, "NaN or infinity")


def test_1bit_padding_bits_must_be_zero() -> None:
    data, spec = valid(quantize=True)
    # a.bias has 4 signs in one byte: bits 4..7 are padding.
    value_byte = data[A_VALUES]
    _reject(patched(data, A_VALUES, bytes([value_byte | 0x80])), spec, "padding")


def test_trailing_and_oversized_are_rejected() -> None:
    data, spec = valid()
    _reject(data + b"\x00", spec, "oversized")
    _reject(data * 2, spec, "oversized")


def test_wrong_model_shape_is_rejected() -> None:
    cfg = config()
    other = {"b.weight": (6, 4), "a.bias": (8,)}  # same sizes on the wire, different tiles
    data = encode_payload(make_payload(other, cfg))
    _reject(data, v1_spec(SHAPES, cfg), "xshape")


def test_k_mismatch_is_rejected() -> None:
    data = encode_payload(make_payload(SHAPES, config(topk=2)))
    _reject(data, v1_spec(SHAPES, config(topk=3)), "k 2, expected 3")


def test_non_bytes_input_is_rejected() -> None:
    _, spec = valid()
    with pytest.raises(PayloadError):
        decode_payload("PDT", spec)  # type: ignore[arg-type]


def test_encoder_refuses_what_peers_would_reject() -> None:
    cfg = config()
    good = make_payload(SHAPES, cfg)
    r = good.results[0]
    bad_idx = DistroResult(r.idx + 4, r.val, r.xshape, r.totalk)
    nan_val = DistroResult(r.idx, torch.full_like(r.val, math.nan), r.xshape, r.totalk)
    repeated = DistroResult(r.idx[..., :1].expand_as(r.idx), r.val, r.xshape, r.totalk)
    for result in (bad_idx, nan_val, repeated):
        with pytest.raises(PayloadError):
            encode_payload(Payload(1, 0, 1, 0, False, (result, good.results[1])))
    with pytest.raises(PayloadError, match="step"):
        encode_payload(Payload(2**32, 0, 1, 0, False, good.results))


def test_spec_refuses_dims_the_wire_cannot_hold() -> None:
    with pytest.raises(ValueError, match="lower compression_chunk"):
        v1_spec({"w": (64 * 65_536,)}, config(chunk=64))


def test_hash_covers_header_and_whole_payload() -> None:
    data, _ = valid()
    expected = hashlib.sha256(
        b"psyche-distro-v1" + struct.pack(">IQQ", 7, 100, 131) + data
    ).digest()
    assert payload_hash(7, 100, 131, data) == expected
    assert len(expected) == 32
    assert payload_hash(8, 100, 131, data) != expected
    # The nonce and xshape are inside the payload bytes, so the commitment covers them too.
    assert payload_hash(7, 100, 131, patched(data, HEADER - 9, b"\x09")) != expected
    assert payload_hash(7, 100, 131, patched(data, A_DIMS, b"\x01")) != expected


def test_payload_size_figures() -> None:
    """Sizes at chunk 64, top-k 8 (reported in the design notes)."""
    figures = {}
    for shape in [(4096,), (512, 512)]:
        for quantize in (True, False):
            spec = v1_spec({"w": shape}, config(quantize, topk=8, chunk=64))
            figures[shape, quantize] = spec.max_bytes
    # 64 chunks (1-D) or 64 tiles (2-D) × 8 coefficients = 512 values per tensor.
    assert figures[(4096,), True] == HEADER + 15 + 512 * 1 + 64
    assert figures[(4096,), False] == HEADER + 15 + 512 * 1 + 1024
    assert figures[(512, 512), True] == HEADER + 19 + 512 * 2 + 64
    assert figures[(512, 512), False] == HEADER + 19 + 512 * 2 + 1024
    cfg = config(True, topk=8, chunk=64)
    payload = make_payload({"w": (512, 512)}, cfg)
    assert len(encode_payload(payload)) == figures[(512, 512), True]


FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


@FUZZ
@given(data=st.binary(max_size=300), quantize=st.booleans())
def test_fuzz_random_bytes_only_raise_payload_error(data: bytes, quantize: bool) -> None:
    spec = v1_spec(SHAPES, config(quantize))
    with contextlib.suppress(PayloadError):
        decode_payload(data, spec)


@FUZZ
@given(
    quantize=st.booleans(),
    position=st.integers(min_value=0, max_value=10_000),
    value=st.integers(min_value=0, max_value=255),
    kind=st.sampled_from(["replace", "insert", "delete"]),
)
def test_fuzz_mutations_only_raise_payload_error(
    quantize: bool, position: int, value: int, kind: str
) -> None:
    data, spec = valid(quantize)
    at = position % len(data)
    if kind == "replace":
        mutated = data[:at] + bytes([value]) + data[at + 1 :]
    elif kind == "insert":
        mutated = data[:at] + bytes([value]) + data[at:]
    else:
        mutated = data[:at] + data[at + 1 :]
    try:
        decoded = decode_payload(mutated, spec)
    except PayloadError:
        return
    # Whatever is accepted re-encodes to the same bytes: the format is canonical.
    assert encode_payload(decoded) == mutated
