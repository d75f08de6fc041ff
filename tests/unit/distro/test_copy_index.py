"""The copy check's sketch and index (psyche.distro.copy_index; issue 38 item 1): the stated
probabilities follow from the parameters, copies at the threshold are found, honest-like pairs are
rarely candidates, repeated tensors and exact copies are found with certainty, and a lookup's work
does not grow with the number of held results."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch

from psyche.distro import DistroResult
from psyche.distro.copy_index import (
    AGREE_MIN,
    BANDS,
    BINS,
    COUNTS,
    EMPTY,
    FILL,
    ROWS,
    CopyIndex,
    CopyKeys,
    CopySketch,
    distro_keys,
    jaccard_at,
    sketch,
)
from psyche.distro.overlap import NEAR_DUPLICATE, signed_keys
from psyche.distro.payload import Payload
from psyche.distro.result_format import distro_fingerprint


def _binom_below(n: int, p: float, t: int) -> float:
    """P(X < t) for X ~ Binomial(n, p), in logs (n is about 1000)."""
    logs = [
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        + k * math.log(p) + (n - k) * math.log1p(-p)
        for k in range(t)
    ]  # fmt: skip
    top = max(logs)
    return math.exp(top) * sum(math.exp(v - top) for v in logs)


def _band_hit(overlap: float) -> float:
    """The chance that a pair at ``overlap`` shares an LSH band (bins independent)."""
    agree = jaccard_at(overlap) * (1 - math.exp(-FILL))
    return 1 - (1 - agree**ROWS) ** BANDS


def test_the_documented_probabilities_follow_from_the_parameters() -> None:
    assert BINS == 1020 and jaccard_at(NEAR_DUPLICATE) == pytest.approx(0.6)
    band_miss = 1 - _band_hit(NEAR_DUPLICATE)
    count_miss = _binom_below(BINS, jaccard_at(NEAR_DUPLICATE) * (1 - math.exp(-FILL)), AGREE_MIN)
    assert band_miss <= 7.0e-8 and count_miss <= 9.2e-8
    assert band_miss + count_miss <= 1.7e-7 < 1e-6
    assert _band_hit(0.1) <= 8.3e-5 and _band_hit(0.2) <= 3.5e-3 and _band_hit(0.3) <= 3.5e-2
    assert _band_hit(0.64) >= 0.99
    assert 1 - _binom_below(BINS, jaccard_at(0.64), AGREE_MIN) <= 1e-3


def _pair(rng: np.random.Generator, n: int, overlap: float) -> tuple[CopyKeys, CopyKeys]:
    """Two key sets of ``n`` keys sharing ``round(overlap * n)`` of them."""
    a = rng.choice(2**40, n, replace=False).astype(np.int64)
    shared = round(overlap * n)
    b = np.concatenate([a[:shared], rng.choice(2**40, n - shared, replace=False) + 2**41])
    return CopyKeys.of([a], [False]), CopyKeys.of([b], [False])


def _found(held: CopyKeys, new: CopyKeys, salt: int) -> bool:
    index: CopyIndex[str] = CopyIndex()
    index.add("held", sketch(b"held", held, salt))
    return bool(index.near(sketch(b"new", new, salt)))


@pytest.mark.parametrize("n", [296, 5000])
def test_copies_at_the_threshold_are_found_and_honest_pairs_are_not(n: int) -> None:
    """296 keys: the tiny model's results; 5000: one hash pass has fewer bins than ``BINS``."""
    rng = np.random.default_rng(n)
    for salt in range(200):
        assert _found(*_pair(rng, n, NEAR_DUPLICATE), salt)
    COUNTS.reset()
    hits = sum(_found(*_pair(rng, n, 0.1), salt) for salt in range(200))
    assert hits == 0 and COUNTS.band_candidates == 0
    # Honest results of a first round share up to 0.64: band candidates, hardly ever measured.
    assert sum(_found(*_pair(rng, n, 0.64), salt) for salt in range(100)) <= 2


def test_a_repeated_tensor_is_found_whatever_the_rest() -> None:
    rng = np.random.default_rng(1)
    big = rng.choice(2**20, 48, replace=False).astype(np.int64)

    def keys(first: np.ndarray) -> CopyKeys:
        rest = rng.choice(2**40, 248, replace=False).astype(np.int64)
        return CopyKeys.of([first, rest], [True, False])

    index: CopyIndex[str] = CopyIndex()
    index.add("held", sketch(b"held", keys(big), 5))
    assert index.near(sketch(b"push", keys(big[::-1].copy()), 5)) == ["held"]  # any order
    changed = big.copy()
    changed[0] += 1
    assert index.near(sketch(b"other", keys(changed), 5)) == []
    # Too small for the repeat rule: not indexed.
    small = CopyKeys.of([big, rng.choice(2**40, 248, replace=False)], [False, False])
    assert sketch(b"s", small, 5).tensors == ()


def test_exact_copies_and_formats_without_keys() -> None:
    index: CopyIndex[str] = CopyIndex()
    index.add("a", CopySketch(b"a"))
    index.add("b", sketch(b"b", CopyKeys.of([np.arange(100, dtype=np.int64)], [True]), 3))
    assert index.exact(CopySketch(b"a")) == ["a"] and index.exact(CopySketch(b"c")) == []
    assert index.near(CopySketch(b"c")) == []  # no keys: nothing but the fingerprint
    # Another salt: never compared by bins (its hashes mean something else).
    twin = sketch(b"d", CopyKeys.of([np.arange(100, dtype=np.int64)], [False]), 4)
    assert index.near(twin) == []
    empty = sketch(b"e", CopyKeys.of([np.zeros(0, dtype=np.int64)], [True]), 3)
    assert empty.bands == () and empty.tensors == () and index.near(empty) == []


def test_a_lookup_does_not_grow_with_the_held_results() -> None:
    """K held honest-like results (pairwise overlap about 0.1): one lookup of a fresh result
    and of a copy hands back the same number of candidates at K = 4 and K = 256."""
    rng = np.random.default_rng(7)
    n, base = 296, rng.choice(2**30, 296, replace=False).astype(np.int64)

    def honest() -> CopyKeys:
        own = rng.choice(2**40, n, replace=False) + 2**41
        keep = rng.random(n) < 0.3
        return CopyKeys.of([np.where(keep, base, own).astype(np.int64)], [False])

    counts = []
    for k in (4, 256):
        index: CopyIndex[int] = CopyIndex()
        held = [honest() for _ in range(k)]
        for i, keys in enumerate(held):
            index.add(i, sketch(bytes([i % 256, i // 256]), keys, 11))
        COUNTS.reset()
        fresh = index.near(sketch(b"fresh", honest(), 11))
        copy = index.near(sketch(b"copy", held[k // 2], 11))
        counts.append((len(fresh), len(copy), COUNTS.band_candidates))
        assert fresh == [] and copy == [k // 2]
    assert counts[0] == counts[1] == (0, 1, 1)


def test_the_keys_are_the_overlaps_keys() -> None:
    """``distro_keys`` (numpy) makes the keys ``signed_keys`` (torch) makes, tensor by tensor;
    a tensor's position changes its hashes, so the same keys in another tensor do not repeat it."""
    g = torch.Generator().manual_seed(0)
    results = []
    for tiles, totalk in ((6, 2816), (1, 64), (4, 4096)):
        idx = torch.stack([torch.randperm(totalk, generator=g)[:8] for _ in range(tiles)])
        val = torch.randn(tiles, 8, generator=g).to(torch.bfloat16)
        results.append(
            DistroResult(
                idx.reshape(tiles, 1, 8), val.reshape(tiles, 1, 8), (tiles, 1, 64, 64), totalk
            )
        )
    keys = distro_keys(Payload(1, 0, 1, 0, False, tuple(results)))
    want = [signed_keys(r.idx, r.val, r.totalk).numpy() for r in results]
    assert keys.sizes == tuple(w.size for w in want) and keys.repeatable == (True, False, True)
    assert np.array_equal(keys.keys, np.concatenate(want))
    swapped = CopyKeys.of([want[2], want[1], want[0]], [True, False, True])
    assert not set(sketch(b"a", keys, 1).tensors) & set(sketch(b"b", swapped, 1).tensors)


def test_the_fingerprint_hashes_all_indices_then_all_signs() -> None:
    """``distro_fingerprint`` hashes every tensor's int64 indices, then every tensor's value
    signs, in tensor order, whatever the dtypes (a pinned definition: peers' fingerprints of one
    result must agree; a trainer names its previous result by it in its commitments)."""
    g = torch.Generator().manual_seed(3)
    results = []
    for tiles, totalk, dtype in (
        (3, 64, torch.int64),
        (1, 4096, torch.int32),
        (2, 256, torch.int16),
    ):
        idx = torch.stack([torch.randperm(totalk, generator=g)[:8] for _ in range(tiles)])
        val = torch.randn(tiles, 8, generator=g).to(torch.bfloat16)
        results.append(
            DistroResult(
                idx.to(dtype).reshape(tiles, 1, 8),
                val.reshape(tiles, 1, 8),
                (tiles, 1, 8, 8),
                totalk,
            )
        )
    payload = Payload(1, 0, 1, 0, False, tuple(results))
    h = hashlib.sha256()
    for r in results:
        h.update(r.idx.to(torch.int64).contiguous().numpy().tobytes())
    for r in results:
        h.update(torch.signbit(r.val.float()).contiguous().numpy().tobytes())
    assert distro_fingerprint(payload) == h.digest()
    assert distro_fingerprint(Payload(1, 0, 1, 0, False, ())) == hashlib.sha256().digest()


@pytest.mark.parametrize("n", [296, 2448, 5000])
def test_bins_agree_as_independent_bins_would(n: int) -> None:
    """The passes' permutations (one odd multiplier each on a key's salted hash) behave as the
    stated probabilities assume: a pair at the threshold agrees in ``J · P(filled)`` of its bins
    with at most binomial variance, and shares ``BANDS · J⁵`` bands on average."""
    rng = np.random.default_rng(n + 1)
    j = jaccard_at(NEAR_DUPLICATE)
    agree, bands = [], []
    for salt in range(300):
        a, b = _pair(rng, n, NEAR_DUPLICATE)
        sa, sb = sketch(b"a", a, salt), sketch(b"b", b, salt)
        assert sa.bins is not None and sb.bins is not None
        same = (sa.bins == sb.bins) & (sa.bins != EMPTY)
        agree.append(int(same.sum()))
        bands.append(int(same.reshape(BANDS, ROWS).all(axis=1).sum()))
    p = j * (1 - math.exp(-FILL))
    mean, var = float(np.mean(agree)), float(np.var(agree))
    assert abs(mean - BINS * p) < 4 * math.sqrt(BINS * p * (1 - p) / 300)
    assert var < 1.25 * BINS * p * (1 - p)
    q = p**ROWS
    assert abs(float(np.mean(bands)) - BANDS * q) < 4 * math.sqrt(BANDS * q * (1 - q) / 300)
