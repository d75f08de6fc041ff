"""The fast sign's evaluation of a tile shape's sparse tensors together (`sign_group`) gives the
exact path's bits, in either layout of the second axis (the tile rows' `bmm`, or each tile's
non-zero rows): mixed tile columns (several `bmm` shapes and runs), lead dimensions, all-zero
tiles, a non-finite tensor in the group (the group falls back to tensor by tensor), dense tensors
beside sparse ones, bf16 inputs, outputs written over the inputs or fresh, float64 evaluation."""

from __future__ import annotations

import pytest
import torch

from psyche.distro import sign_bound, sign_group
from psyche.distro.dct import decode_sign_exact

from .test_apply_determinism import random_encoded
from .test_fast_apply import same_bits

SHAPES = [(2, 3, 8, 16), (3, 1, 8, 16), (2, 2, 2, 8, 16), (1, 5, 8, 16), (4, 3, 8, 16)]


def _inputs(seed: int) -> list[torch.Tensor]:
    xs = [random_encoded(s, seed=seed + n, density=0.03) for n, s in enumerate(SHAPES)]
    xs[1][0] = 0.0  # a row of all-zero tiles
    xs[3][0, 2, 3, 4] = 2.0**-140  # a lone subnormal: the tile's ‖X‖₁ may read as 0
    xs.append(random_encoded((2, 2, 8, 16), seed=seed + 9, density=0.5))  # dense: one by one
    xs.append(random_encoded((1, 2, 8, 16), seed=seed + 10, density=0.03).bfloat16())
    return xs


@pytest.mark.parametrize("kept", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("batch", [1, 300, 1 << 18])
def test_a_group_gives_the_exact_bits(
    monkeypatch: pytest.MonkeyPatch, overwrite: bool, batch: int, kept: float
) -> None:
    """`kept` 0 sends the group through the tile rows' `bmm`, 1 through the tile layout with
    every row kept if need be."""
    monkeypatch.setattr(sign_group, "_BATCH", batch)
    monkeypatch.setattr(sign_group, "_KEPT_ROWS", kept)
    calls = []
    group = sign_bound.tiles_group
    monkeypatch.setattr(sign_bound, "tiles_group", lambda *a: calls.append(len(a[0])) or group(*a))
    xs = _inputs(seed=batch)
    expected = [decode_sign_exact(x) for x in xs]
    parts: dict[str, float] = {}
    inputs = [x.clone() for x in xs] if overwrite else xs
    outs = sign_bound.fast_decode_sign_many(inputs, parts, overwrite=overwrite)
    assert calls == [6]  # the sparse ones, bf16 included; the dense one alone
    assert parts["elements"] == sum(x.numel() for x in xs)
    assert all(same_bits(out, want) for out, want in zip(outs, expected, strict=True))


def test_every_element_undecided_in_a_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound that decides nothing: every element of the group's live tiles is recomputed."""
    monkeypatch.setattr(sign_bound, "l1_bound_coefficients", lambda h, w, dtype: (2.0**20, 1.0))
    xs = _inputs(seed=3)[:5]
    outs = sign_bound.fast_decode_sign_many([x.clone() for x in xs], overwrite=True)
    assert all(same_bits(o, decode_sign_exact(x)) for o, x in zip(outs, xs, strict=True))


def test_a_non_finite_tensor_sends_its_group_tensor_by_tensor() -> None:
    xs = _inputs(seed=5)
    xs[2][1, 0, 1, 2, 3] = float("inf")
    xs[4][0, 0, 0, 0] = float("nan")
    outs = sign_bound.fast_decode_sign_many(xs)
    for out, x in zip(outs, xs, strict=True):
        assert torch.equal(out.isnan(), decode_sign_exact(x).isnan())
        assert torch.equal(out.nan_to_num(), decode_sign_exact(x).nan_to_num())


def test_float64_evaluation_in_a_group() -> None:
    """Reduced-precision float32 matmuls: the group evaluates in float64 (nothing overwritten)."""
    xs = _inputs(seed=7)
    kept = [x.clone() for x in xs]
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        outs = sign_bound.fast_decode_sign_many(xs, overwrite=True)
    finally:
        torch.set_float32_matmul_precision(before)
    assert all(same_bits(o, decode_sign_exact(x)) for o, x in zip(outs, kept, strict=True))


@pytest.mark.parametrize("limit", [0, 1 << 16])
def test_one_dimensional_tensors_by_either_path(
    monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """1-D chunks up to `_ROWS_EXACT` elements go exact, above it the float path with its bound:
    both give the exact bits (0 sends these through the float path)."""
    monkeypatch.setattr(sign_bound, "_ROWS_EXACT", limit)
    xs = [
        random_encoded(s, seed=n, density=d)
        for n, s in enumerate([(40, 64), (7, 3), (5, 1)])
        for d in (0.05, 1.0)
    ]
    xs.append(torch.zeros(3, 64))
    xs.append(random_encoded((4, 64), seed=9, density=0.5).bfloat16())
    outs = sign_bound.fast_decode_sign_many(xs)
    assert all(same_bits(o, decode_sign_exact(x)) for o, x in zip(outs, xs, strict=True))


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_one_dimensional_tensors_with_a_non_finite_value(bad: float) -> None:
    """Short 1-D chunks go exact in NumPy unless a value is not finite: then `decode_sign_exact`
    itself decides them all, as it did before."""
    xs = [random_encoded((6, 64), seed=n, density=0.3) for n in range(3)]
    xs[1][2, 5] = bad
    outs = sign_bound.fast_decode_sign_many(xs)
    for out, x in zip(outs, xs, strict=True):
        want = decode_sign_exact(x)
        assert torch.equal(out.isnan(), want.isnan())
        assert same_bits(out.nan_to_num(), want.nan_to_num())


def test_kept_scratch_across_calls_and_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Buffers kept between calls (per thread, the large ones dropped) change no bits: a second
    call, a call with other shapes and calls from other threads at once."""
    import threading

    from psyche.distro import sign_parts

    monkeypatch.setattr(sign_parts, "_KEPT_BYTES", 4096)
    monkeypatch.setattr(sign_group, "_BATCH", 300)
    runs = [_inputs(seed=11), _inputs(seed=12)[:3], _inputs(seed=11)]
    wants = [[decode_sign_exact(x) for x in xs] for xs in runs]
    failures: list[int] = []

    def check(n: int) -> None:
        for xs, want in zip(runs, wants, strict=True):
            outs = sign_bound.fast_decode_sign_many([x.clone() for x in xs], overwrite=True)
            if not all(same_bits(o, e) for o, e in zip(outs, want, strict=True)):
                failures.append(n)

    threads = [threading.Thread(target=check, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    check(-1)
    for thread in threads:
        thread.join()
    assert failures == []
    kept = sign_parts.thread_scratch().buffers.values()
    assert all(b.numel() * b.element_size() <= 4096 for b in kept)
