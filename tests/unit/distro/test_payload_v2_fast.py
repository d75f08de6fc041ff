"""Payload v2's whole-payload decode (issue 38: one Elias–Fano decode per code, the tensors views
of one index and one value array) against the tensor-by-tensor decode it replaced: the same bits
for every value dtype, the same refusals with the same messages, and the copy check's sketch
from the decoder's flat arrays equal to the sketch from the tensors."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from psyche.daemon.rounds import decoded_nbytes
from psyche.distro import DistroResult, Payload, PayloadError, PayloadSpec, encode_payload
from psyche.distro.copy_index import distro_sketch
from psyche.distro.elias_fano import EliasFano, EliasFanoError
from psyche.distro.payload_v2 import _decode_each, _plan, decode_v2

from .test_payload_v2 import config, make_payload

# Tensors of three tile sizes, one with k = n (no index bits), sizes repeated out of order.
SHAPES = {
    "a.weight": (16, 12),
    "b.bias": (2,),
    "c.weight": (4, 6),
    "d.bias": (9,),
    "e.weight": (12, 16),
    "f.bias": (8,),
}


def _by_tensor(data: bytes, spec: PayloadSpec) -> tuple[DistroResult, ...]:
    """The old decode: tensor by tensor (what a defect still takes)."""
    plan = _plan(spec)
    bit_bytes = (plan.n_bits + 7) // 8
    at = len(data) - plan.body_bytes
    bits = np.unpackbits(np.frombuffer(data, np.uint8, bit_bytes, at), bitorder="little")
    return _decode_each(spec, plan, bits, data, at + bit_bytes)


def _same(a: tuple[DistroResult, ...], b: tuple[DistroResult, ...]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.xshape, x.totalk) == (y.xshape, y.totalk)
        for s, t in ((x.idx, y.idx), (x.val, y.val)):
            assert (s.dtype, s.shape, s.is_contiguous()) == (t.dtype, t.shape, True)
            assert s.contiguous().view(torch.uint8).tolist() == t.view(torch.uint8).tolist()


def _sketches_agree(p: Payload) -> None:
    assert p.flat is not None and p.flat.results is p.results
    fast = distro_sketch(p, 99)
    slow = distro_sketch(dataclasses.replace(p, results=tuple(p.results)), 99)  # no flat used
    assert (fast.fingerprint, fast.scheme, fast.bands, fast.tensors) == (
        slow.fingerprint,
        slow.scheme,
        slow.bands,
        slow.tensors,
    )
    assert np.array_equal(fast.bins, slow.bins)
    # The kept-decode budget reads the flat arrays' sizes: the tensors' bytes, whatever the dtype.
    want = sum(r.idx.nbytes + r.val.nbytes for r in p.results)
    assert decoded_nbytes(p) == want
    assert decoded_nbytes(dataclasses.replace(p, results=tuple(p.results))) == want


@pytest.mark.parametrize("quantize", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_whole_payload_decode_is_the_tensor_decode(
    quantize: bool, dtype: torch.dtype, seed: int
) -> None:
    cfg = config(quantize, topk=3)
    payload = make_payload(SHAPES, cfg, dtype, seed)
    if not quantize:  # zeros of both signs and a subnormal among the values
        v = payload.results[0].val.reshape(-1)
        v[:3] = torch.tensor([0.0, -0.0, 1e-40]).to(dtype)
    spec = PayloadSpec.from_model(SHAPES, cfg, dtype)
    data = encode_payload(payload)
    got = decode_v2(data, spec)
    _same(got.results, _by_tensor(data, spec))
    _sketches_agree(got)


def test_defects_are_refused_as_before() -> None:
    """Random byte flips in the body: the fast path accepts exactly what the tensor-by-tensor
    decode accepts (same bits), and refuses the rest with its message."""
    rng = random.Random(5)
    for quantize, dtype in ((True, torch.float32), (False, torch.bfloat16)):
        cfg = config(quantize, topk=3)
        spec = PayloadSpec.from_model(SHAPES, cfg, dtype)
        data = encode_payload(make_payload(SHAPES, cfg, dtype, 3))
        body = _plan(spec).body_bytes
        outcomes = set()
        for _ in range(300):
            at = len(data) - body + rng.randrange(body)
            bad = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
            try:
                old: object = _by_tensor(bad, spec)
            except PayloadError as e:
                old = str(e)
            try:
                new: object = decode_v2(bad, spec).results
            except PayloadError as e:
                new = str(e)
            if isinstance(old, str) or isinstance(new, str):
                assert old == new or (
                    "padding bits" in str(new) and isinstance(old, tuple)  # checked before
                )
                outcomes.add("refused")
            else:
                _same(new, old)  # type: ignore[arg-type]
                outcomes.add("accepted")
        assert outcomes == {"refused", "accepted"}


def test_a_non_finite_value_is_refused_by_name() -> None:
    cfg = config(False, topk=3)
    spec = PayloadSpec.from_model(SHAPES, cfg, torch.float32)
    data = encode_payload(make_payload(SHAPES, cfg, torch.float32, 4))
    # The last value is the last tensor's: make it NaN (f32, little-endian).
    bad = data[:-4] + np.array([np.nan], dtype="<f4").tobytes()
    with pytest.raises(PayloadError, match=r"tensor 'f\.bias': values include NaN"):
        decode_v2(bad, spec)


def test_tensors_are_views_of_the_flat_arrays() -> None:
    cfg = config(True, topk=3)
    spec = PayloadSpec.from_model(SHAPES, cfg)
    p = decode_v2(encode_payload(make_payload(SHAPES, cfg, torch.float32, 6)), spec)
    assert p.flat is not None
    at = 0
    for r in p.results:
        n = r.idx.numel()
        assert r.idx.reshape(-1).tolist() == p.flat.idx[at : at + n].tolist()
        assert r.val.reshape(-1).tolist() == p.flat.val[at : at + n].tolist()
        at += n
    assert at == p.flat.idx.size == p.flat.val.size


@pytest.mark.parametrize("n, k", [(64, 8), (2816, 8), (4096, 8), (9, 9), (100, 1), (2**20, 3)])
def test_elias_fano_decode_is_the_checked_decode(n: int, k: int) -> None:
    """`EliasFano.decode` (one flat pass) gives `_decode`'s values, and refuses what it refuses
    with its message, on codings and on random flips of them."""
    rng = np.random.default_rng(n + k)
    code = EliasFano.for_tile(n, k)
    tiles = 40
    idx = np.sort(np.stack([rng.choice(n, k, replace=False) for _ in range(tiles)]), axis=1)
    bits = code.encode(idx)
    assert np.array_equal(code.decode(bits, tiles), idx)
    outcomes = set()
    for _ in range(200):
        bad = bits.copy()
        if bad.size:
            bad[rng.integers(0, bad.size, size=int(rng.integers(1, 4)))] ^= 1
        try:
            old: object = code._decode(bad, tiles)
        except EliasFanoError as e:
            old = str(e)
        try:
            new: object = code.decode(bad, tiles)
        except EliasFanoError as e:
            new = str(e)
        if isinstance(old, str) or isinstance(new, str):
            assert old == new
            outcomes.add("refused")
        else:
            assert np.array_equal(new, old)  # type: ignore[arg-type]
            outcomes.add("accepted")
    assert outcomes == ({"accepted"} if code.tile_bits == 0 else {"refused", "accepted"})
