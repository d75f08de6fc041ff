"""The copy check's sketch made in one pass over a DisTrO payload (``distro_sketch``, what
``psyche.daemon.rounds.result_sketch`` uses for the DisTrO format): it is the sketch of the format's
fingerprint and keys whatever the payload's dtypes, signs or empty tensors; a run's layout and
salt are prepared once, not per result; and the index finds every held result that shares a band,
however many share it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from psyche.daemon.rounds import result_sketch
from psyche.distro import DistroResult, PayloadSpec
from psyche.distro.copy_index import (
    COUNTS,
    CopyIndex,
    CopyKeys,
    CopySketch,
    _plan,
    distro_keys,
    distro_sketch,
    sketch,
)
from psyche.distro.overlap import signed_keys
from psyche.distro.payload import Payload
from psyche.distro.result_format import DistroFormat, distro_fingerprint

LAYOUT = ((6, 2816), (1, 64), (0, 64), (4, 4096), (2, 256))
"""(tiles, totalk) per tensor; a tensor of no tiles included."""


def _payload(seed: int, idx_dtype: torch.dtype, val_dtype: torch.dtype, k: int = 8) -> Payload:
    g = torch.Generator().manual_seed(seed)
    results = []
    for tiles, totalk in LAYOUT:
        idx = torch.stack(
            [torch.randperm(totalk, generator=g)[:k] for _ in range(tiles)]
            or [torch.zeros(0, k, dtype=torch.int64)]
        ).reshape(tiles, k)
        val = torch.randn(tiles, k, generator=g)
        if tiles:
            val[0, :3] = torch.tensor([0.0, -0.0, 1e-40])  # zero, signed zero, subnormal
        results.append(
            DistroResult(
                idx.reshape(tiles, 1, k).to(idx_dtype),
                val.reshape(tiles, 1, k).to(val_dtype),
                (tiles, 1, 64, 64),
                totalk,
            )
        )
    return Payload(1, 0, 1, 0, False, tuple(results))


def _same(a: CopySketch, b: CopySketch) -> None:
    assert (a.fingerprint, a.scheme, a.bands, a.tensors) == (
        b.fingerprint,
        b.scheme,
        b.bands,
        b.tensors,
    )
    assert a.bins is not None and b.bins is not None and np.array_equal(a.bins, b.bins)


@pytest.mark.parametrize(
    "idx_dtype, val_dtype",
    [
        (torch.int64, torch.float32),  # as decoded: through numpy
        (torch.int32, torch.bfloat16),
        (torch.int16, torch.float16),
        (torch.int64, torch.float64),
    ],
)
def test_one_pass_is_the_sketch_of_the_fingerprint_and_keys(
    idx_dtype: torch.dtype, val_dtype: torch.dtype
) -> None:
    for seed in range(3):
        p = _payload(seed, idx_dtype, val_dtype)
        keys = distro_keys(p)
        want = [signed_keys(r.idx, r.val, r.totalk).numpy() for r in p.results]
        assert np.array_equal(keys.keys, np.concatenate(want))
        for salt in (7, 2**64 - 3):
            _same(distro_sketch(p, salt), sketch(distro_fingerprint(p), keys, salt))


def test_an_empty_payload_and_result_sketch_under_the_distro_format() -> None:
    empty = Payload(1, 0, 1, 0, False, ())
    _same(distro_sketch(empty, 3), sketch(distro_fingerprint(empty), distro_keys(empty), 3))
    p = _payload(9, torch.int64, torch.float32)
    fmt = DistroFormat(PayloadSpec(tensors=(), quantized=False))  # the spec is for decoding
    got = result_sketch(p, fmt, 5)
    assert got.fingerprint == fmt.fingerprint(p)
    _same(got, sketch(fmt.fingerprint(p), fmt.copy_keys(p), 5))


def test_a_runs_layout_is_prepared_once() -> None:
    """Every result of a run has one layout: its constants are made for the first sketch only
    (rebuilding them per result was a third of a sketch's cost)."""
    _plan.cache_clear()
    for seed in range(20):
        distro_sketch(_payload(seed, torch.int64, torch.float32), 11)
    info = _plan.cache_info()
    assert info.misses == 1 and info.hits == 19


def test_every_held_result_sharing_a_band_is_a_candidate() -> None:
    """Results with the same keys share all their bands: each is a band candidate of a new one
    (the first entry of a band and the rest, ``_more``), in the order they were held."""
    rng = np.random.default_rng(4)
    keys = CopyKeys.of([rng.choice(2**40, 300, replace=False).astype(np.int64)], [False])
    other = CopyKeys.of([rng.choice(2**40, 300, replace=False).astype(np.int64)], [False])
    index: CopyIndex[str] = CopyIndex()
    for name, k in (("a", keys), ("x", other), ("b", keys), ("c", keys)):
        index.add(name, sketch(name.encode(), k, 13))
    COUNTS.reset()
    assert index.near(sketch(b"new", keys, 13)) == ["a", "b", "c"]
    assert COUNTS.band_candidates == 3
    assert index.near(sketch(b"new", other, 13)) == ["x"]


def test_every_held_result_repeating_a_tensor_is_a_candidate() -> None:
    """Held results with one large tensor's key set in common (the rest unrelated): each is a
    candidate of a new result repeating it (the first entry of a tensor hash and the rest)."""
    rng = np.random.default_rng(5)
    big = rng.choice(2**20, 48, replace=False).astype(np.int64)

    def keys(first: np.ndarray) -> CopyKeys:
        rest = rng.choice(2**40, 300, replace=False).astype(np.int64) + 2**41
        return CopyKeys.of([first, rest], [True, False])

    index: CopyIndex[str] = CopyIndex()
    other = rng.choice(2**20, 48, replace=False).astype(np.int64) + 2**21
    for name, first in (("a", big), ("x", other), ("b", big), ("c", big)):
        index.add(name, sketch(name.encode(), keys(first), 17))
    assert index.near(sketch(b"new", keys(big[::-1].copy()), 17)) == ["a", "b", "c"]
    assert index.near(sketch(b"new", keys(other), 17)) == ["x"]
