"""Payload format v2: Elias–Fano index coding, round trips, equivalence with v1, every rejection
path, sizes against the entropy bound, and fuzzing (as test_payload.py does for v1)."""

from __future__ import annotations

import contextlib
import math

import numpy as np
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
    aggregate,
    compress,
    decode_payload,
    encode,
    encode_payload,
    sign_values,
)
from psyche.distro.elias_fano import EliasFano, EliasFanoError
from psyche.distro.payload_v2 import body_bytes, max_bytes_v2

SHAPES = {"b.weight": (4, 6), "a.bias": (8,), "c.weight": (16, 12), "d.bias": (9,)}
FIXED = 9  # magic 3 + version 1 + flags 1 + layout 4; then four LEB128 integers
FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


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
    header: tuple[int, int, int, int] = (7, 100, 131, 3),
) -> Payload:
    generator = torch.Generator().manual_seed(seed)
    results = []
    for name in sorted(shapes):
        x = torch.randn(shapes[name], generator=generator)
        r = compress(encode(x, cfg.compression_chunk), cfg.compression_topk)
        results.append(DistroResult(r.idx, r.val.to(dtype), r.xshape, r.totalk))
    return Payload(*header, cfg.quantize_1bit, tuple(results))


def valid(quantize: bool = False) -> tuple[bytes, PayloadSpec]:
    cfg = config(quantize)
    return encode_payload(make_payload(SHAPES, cfg)), PayloadSpec.from_model(SHAPES, cfg)


def patched(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


def by_index(result: DistroResult) -> tuple[torch.Tensor, torch.Tensor]:
    """(idx, val) with each tile's pairs ordered by index, as v2 sends them."""
    order = result.idx.argsort(dim=-1)
    return result.idx.gather(-1, order), result.val.gather(-1, order)


# --- Elias–Fano ---------------------------------------------------------------------------------


@FUZZ
@given(data=st.data(), n=st.integers(1, 5000), tiles=st.integers(1, 6))
def test_elias_fano_round_trip(data: st.DataObject, n: int, tiles: int) -> None:
    k = data.draw(st.integers(1, min(n, 40)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = np.sort(np.stack([rng.choice(n, k, replace=False) for _ in range(tiles)]), axis=1)
    code = EliasFano.for_tile(n, k)
    bits = code.encode(x.astype(np.int64))
    assert bits.shape == (tiles * code.tile_bits,)
    assert np.array_equal(code.decode(bits, tiles), x)
    # Never worse than a fixed-width index, and within 2 bits per index of the bound.
    assert code.tile_bits <= k * max(n - 1, 1).bit_length()
    assert code.tile_bits <= math.log2(math.comb(n, k)) + 2 * k + 1


def test_elias_fano_sizes() -> None:
    assert EliasFano.for_tile(4096, 8).tile_bits == 87  # bound 80.7; v1 spends 128
    assert EliasFano.for_tile(2816, 8).tile_bits == 82  # 44×64 tiles of a 264-row embedding
    assert EliasFano.for_tile(64, 8).tile_bits == 39  # 1-D chunks; v1 spends 64
    assert EliasFano.for_tile(8, 8).tile_bits == 0  # every coefficient: nothing to say


def test_elias_fano_rejects_non_codes() -> None:
    code = EliasFano.for_tile(100, 3)
    good = code.encode(np.array([[1, 50, 99]], dtype=np.int64))
    split = 3 * code.low_bits
    extra_one = good.copy()
    extra_one[split + np.flatnonzero(good[split:] == 0)[0]] = 1
    with pytest.raises(EliasFanoError, match="high-part ones"):
        code.decode(extra_one, 1)
    repeat = code.encode(np.array([[5, 6, 7]], dtype=np.int64))
    repeat[:split] = np.tile(repeat[: code.low_bits], 3)  # same low part, same bucket: 5, 5, 5
    with pytest.raises(EliasFanoError, match="strictly increasing"):
        code.decode(repeat, 1)
    assert (code.low_bits, code.high_bits) == (4, 9)  # 7 buckets of 16: up to 111 is codable
    top = code.encode(np.array([[0, 1, 111]], dtype=np.int64))
    with pytest.raises(EliasFanoError, match="not below 100"):
        code.decode(top, 1)
    with pytest.raises(EliasFanoError, match="bits"):
        code.decode(good[:-1], 1)


# --- round trips and equivalence with v1 --------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_round_trip_unquantized(dtype: torch.dtype) -> None:
    cfg = config()
    payload = make_payload(SHAPES, cfg, dtype)
    spec = PayloadSpec.from_model(SHAPES, cfg, value_dtype=dtype)
    data = encode_payload(payload)
    assert data[3] == 2 and len(data) <= spec.max_bytes
    back = decode_payload(data, spec)
    assert (back.step, back.batch_start, back.batch_end, back.trainer_nonce) == (7, 100, 131, 3)
    for got, sent in zip(back.results, payload.results, strict=True):
        idx, val = by_index(sent)
        assert torch.equal(got.idx, idx) and got.val.dtype == dtype and torch.equal(got.val, val)
        assert (got.xshape, got.totalk) == (sent.xshape, sent.totalk)
    assert encode_payload(back) == data


def test_round_trip_1bit_keeps_signs() -> None:
    cfg = config(quantize=True)
    payload = make_payload(SHAPES, cfg)
    back = decode_payload(encode_payload(payload), PayloadSpec.from_model(SHAPES, cfg))
    assert back.quantized
    for got, sent in zip(back.results, payload.results, strict=True):
        idx, val = by_index(sent)
        assert torch.equal(got.idx, idx)
        assert torch.equal(got.val, sign_values(val, torch.float32))


@pytest.mark.parametrize("quantize", [False, True])
def test_v1_and_v2_decode_to_the_same_aggregate(quantize: bool) -> None:
    """Lossless: the same pairs arrive, so the mean `apply` uses is bit-identical."""
    cfg = config(quantize, topk=3, chunk=4)
    payloads = [make_payload(SHAPES, cfg, seed=s) for s in range(3)]
    decoded = {
        v: [
            decode_payload(encode_payload(p, v), PayloadSpec.from_model(SHAPES, cfg, version=v))
            for p in payloads
        ]
        for v in (1, 2)
    }
    for n in range(len(SHAPES)):
        one, two = ([p.results[n] for p in decoded[v]] for v in (1, 2))
        for a, b in zip(one, two, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(by_index(a), by_index(b), strict=True))
        assert torch.equal(aggregate(one), aggregate(two))


def test_header_integers_at_their_limits() -> None:
    cfg = config(quantize=True)
    spec = PayloadSpec.from_model(SHAPES, cfg)
    for header in [(0, 0, 0, 0), (2**32 - 1, 2**63, 2**64 - 1, 2**32 - 1)]:
        data = encode_payload(make_payload(SHAPES, cfg, header=header))
        back = decode_payload(data, spec)
        assert (back.step, back.batch_start, back.batch_end, back.trainer_nonce) == header
    assert len(data) == spec.max_bytes  # the widest header fills the bound exactly


def test_sizes_at_chunk_64_top_8() -> None:
    """Bits per 64×64 tile: 87 (Elias–Fano) + 8 signs, against v1's 8 × 17."""
    cfg = config(True, topk=8, chunk=64)
    spec = PayloadSpec.from_model({"w": (512, 512)}, cfg)
    assert body_bytes(spec) == math.ceil(64 * 95 / 8)
    assert max_bytes_v2(spec) == FIXED + 29 + body_bytes(spec)
    v1 = PayloadSpec.from_model({"w": (512, 512)}, cfg, version=1).max_bytes
    assert v1 == 33 + 19 + 64 * 17


# --- rejections ---------------------------------------------------------------------------------


def _reject(data: bytes, spec: PayloadSpec, match: str) -> None:
    with pytest.raises(PayloadError, match=match):
        decode_payload(data, spec)


def test_truncated_at_every_length() -> None:
    for quantize in (False, True):
        data, spec = valid(quantize)
        for size in range(len(data)):
            with pytest.raises(PayloadError):
                decode_payload(data[:size], spec)


@pytest.mark.parametrize(
    ("offset", "new", "match"),
    [
        (0, b"PDX", "magic"),
        (3, b"\x01", "version 1, the run expects 2"),
        (3, b"\x03", "version"),
        (4, b"\x02", "commitments present; the run does not take them"),
        (4, b"\x04", "flag bits"),
        (4, b"\x01", "quantize flag"),
        (5, b"\x00\x00\x00\x00", "layout digest"),
        (FIXED, b"\x87\x00", "minimally"),
        (FIXED, b"\xff\xff\xff\xff\x7f", "step exceeds"),
    ],
)
def test_bad_header_fields_are_rejected(offset: int, new: bytes, match: str) -> None:
    data, spec = valid()
    _reject(patched(data, offset, new), spec, match)


def test_varint_limits() -> None:
    cfg = config()
    spec = PayloadSpec.from_model(SHAPES, cfg)
    data = encode_payload(make_payload(SHAPES, cfg, header=(1, 2**64 - 1, 2**64 - 1, 0)))
    # batch length 0 after a maximal start: one more would overflow u64.
    length_at = FIXED + 1 + 10
    assert data[length_at] == 0
    _reject(patched(data, length_at, b"\x01"), spec, "batch length exceeds")
    eleven = b"\x80" * 10 + b"\x00"
    _reject(data[:FIXED] + b"\x01" + eleven + data[length_at:], spec, "exceeds|longer|oversized")


def test_wrong_model_or_config_is_rejected_by_the_layout_digest() -> None:
    cfg = config()
    other = {"b.weight": (6, 4), "a.bias": (8,), "c.weight": (16, 12), "d.bias": (9,)}
    _reject(encode_payload(make_payload(other, cfg)), PayloadSpec.from_model(SHAPES, cfg), "layout")
    data = encode_payload(make_payload(SHAPES, config(topk=2)))
    _reject(data, PayloadSpec.from_model(SHAPES, config(topk=3)), "layout|oversized")
    f32 = encode_payload(make_payload(SHAPES, cfg, torch.float32))
    spec_f32 = PayloadSpec.from_model(SHAPES, cfg, value_dtype=torch.float32)
    _reject(f32, PayloadSpec.from_model(SHAPES, cfg, version=2), "layout|oversized")
    assert decode_payload(f32, spec_f32).results[0].val.dtype == torch.float32


def test_v1_bytes_under_a_v2_spec_and_back() -> None:
    cfg = config()
    payload = make_payload(SHAPES, cfg)
    v1_spec = PayloadSpec.from_model(SHAPES, cfg, version=1)
    _reject(encode_payload(payload, 1), PayloadSpec.from_model(SHAPES, cfg), "version|oversized")
    _reject(encode_payload(payload, 2), v1_spec, "version 2, the run expects 1")
    with pytest.raises(ValueError):
        encode_payload(payload, 3)


def test_body_defects_are_rejected() -> None:
    data, spec = valid(quantize=True)
    _reject(data + b"\x00", spec, "body has|oversized")
    _reject(data * 2, spec, "oversized")
    _reject(data[:-1], spec, "body has")


def test_padding_bits_must_be_zero() -> None:
    data, spec = valid(quantize=False)
    n_bits = sum(
        t.n_values // t.k * EliasFano.for_tile(t.totalk, t.k).tile_bits for t in spec.tensors
    )
    assert n_bits % 8  # SHAPES leave padding in the last byte of the bit section
    last = len(data) - body_bytes(spec) + (n_bits + 7) // 8 - 1
    _reject(patched(data, last, bytes([data[last] | 0x80])), spec, "padding")


def test_index_and_value_defects_are_rejected() -> None:
    cfg = config()
    data = encode_payload(make_payload(SHAPES, cfg, torch.float32))
    spec = PayloadSpec.from_model(SHAPES, cfg, value_dtype=torch.float32)
    nan = np.float32(np.nan).tobytes()
    _reject(patched(data, len(data) - 4, nan), spec, "NaN or infinity")
    start = FIXED + 4  # the first tensor's Elias–Fano bits follow a 4-byte header tail here
    _reject(patched(data, start, b"\xff\xff\xff\xff\xff"), spec, "tensor")


def test_encoder_refuses_what_peers_would_reject() -> None:
    cfg = config()
    good = make_payload(SHAPES, cfg)
    r = good.results[0]
    bad_idx = DistroResult(r.idx + 16, r.val, r.xshape, r.totalk)
    nan_val = DistroResult(r.idx, torch.full_like(r.val, math.nan), r.xshape, r.totalk)
    repeated = DistroResult(r.idx[..., :1].expand_as(r.idx), r.val, r.xshape, r.totalk)
    for result in (bad_idx, nan_val, repeated):
        with pytest.raises(PayloadError):
            encode_payload(Payload(1, 0, 1, 0, False, (result, *good.results[1:])))
    with pytest.raises(PayloadError, match="step"):
        encode_payload(Payload(2**32, 0, 1, 0, False, good.results))
    with pytest.raises(PayloadError, match="after end"):
        encode_payload(Payload(1, 5, 4, 0, False, good.results))


# --- fuzzing ------------------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=300), quantize=st.booleans())
def test_fuzz_random_bytes_only_raise_payload_error(data: bytes, quantize: bool) -> None:
    spec = PayloadSpec.from_model(SHAPES, config(quantize))
    with contextlib.suppress(PayloadError):
        decode_payload(data, spec)


@FUZZ
@given(
    quantize=st.booleans(),
    position=st.integers(min_value=0, max_value=10_000),
    value=st.integers(min_value=0, max_value=255),
    kind=st.sampled_from(["replace", "insert", "delete", "flip"]),
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
    elif kind == "flip":
        mutated = data[:at] + bytes([data[at] ^ (1 << (value % 8))]) + data[at + 1 :]
    else:
        mutated = data[:at] + data[at + 1 :]
    try:
        decoded = decode_payload(mutated, spec)
    except PayloadError:
        return
    # Whatever is accepted re-encodes to the same bytes: the format is canonical.
    assert encode_payload(decoded) == mutated
