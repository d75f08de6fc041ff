"""The fast `decode_sign` (float matmuls with a proven error bound, exact only near zero) gives
exactly the exact path's bits, and its bound holds for float evaluations in other summation orders.

docs/distro.md, "Fast path: a float evaluation with a proven bound", has the derivation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psyche.distro import DistroResult, aggregate, decode_sign, encoded_shape
from psyche.distro.compress import chunk_shape, totalk_of
from psyche.distro.dct import decode_sign_exact, decode_sign_many
from psyche.distro.dct_exact import basis_scale, exact_rows_times_basis, int_basis
from psyche.distro.float_bound import (
    l1_bound_coefficients,
    row_bound_constant,
    tile_bound_constant,
    tile_bound_constant_l1,
)

from .test_apply_determinism import probe_inputs, random_encoded

U32, TINY32 = 2.0**-24, 2.0**-126


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a, b)
        and (torch.equal(torch.signbit(a), torch.signbit(b)))
    )


@pytest.mark.parametrize(
    "shape",
    [(40, 64), (7, 3), (5, 1), (2, 3, 64, 64), (3, 2, 44, 64), (1, 4, 29, 12), (1, 1, 1, 1)],
)
@pytest.mark.parametrize("density", [0.01, 0.2, 1.0])
def test_fast_equals_exact_on_the_decode_vectors(shape: tuple[int, ...], density: float) -> None:
    x = random_encoded(shape, seed=sum(shape), density=density)
    assert same_bits(decode_sign(x), decode_sign_exact(x))


def test_fast_equals_exact_on_the_probe_payloads() -> None:
    """The antisymmetric tiles of the determinism probe: exactly zero sums on every diagonal."""
    inputs = probe_inputs()
    for dense in inputs["dense"]:  # type: ignore[attr-defined]
        assert same_bits(decode_sign(dense), decode_sign_exact(dense))


@pytest.mark.parametrize("shape", [(264, 512), (512, 2048), (512,), (3,)])
def test_fast_equals_exact_on_aggregated_peer_payloads(shape: tuple[int, ...]) -> None:
    """What `Distro.apply` decodes: the mean of 3 peers' 1-bit top-8 payloads (ties cancel)."""
    gen = torch.Generator().manual_seed(len(shape) + shape[0])
    xshape = encoded_shape(shape, 64)
    grid, totalk = chunk_shape(xshape), totalk_of(xshape)
    k = min(8, totalk)
    results = []
    for _ in range(3):
        idx = torch.rand(*grid, totalk, generator=gen).topk(k, dim=-1).indices
        val = torch.randint(0, 2, (*grid, k), generator=gen).float() * 2 - 1
        results.append(DistroResult(idx, val, xshape, totalk))
    x = aggregate(results, torch.float32, torch.device("cpu"), distinct=True)
    assert same_bits(decode_sign(x), decode_sign_exact(x))


def test_fast_equals_exact_when_float32_matmuls_may_be_reduced() -> None:
    """With TF32/bf16 matmuls allowed the fast path runs in float64; same bits."""
    x = random_encoded((2, 2, 64, 64), seed=3, density=0.3)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        fast = decode_sign(x)
    finally:
        torch.set_float32_matmul_precision(before)
    assert same_bits(fast, decode_sign_exact(x))


def test_extreme_magnitudes_and_signed_zeros() -> None:
    x = torch.zeros(4, 3, 8, 8)
    x[0, 0, 0, 0] = -0.0
    x[0, 1] = torch.randn(8, 8) * 1e-40  # subnormal coefficients
    x[0, 2] = torch.randn(8, 8) * 1e37  # sums may overflow float32
    x[1, 0, 0, 1], x[1, 0, 0, 2] = 2.0**-149, -(2.0**-149)
    x[2, 1, 3, 3] = 1.0
    x[3] = -0.0
    assert same_bits(decode_sign(x), decode_sign_exact(x))
    ones = torch.tensor([[0.0, 0.5, 0.0]])  # an exact zero of the basis: the middle weight stays
    assert same_bits(decode_sign(ones), torch.tensor([1.0, 0.0, -1.0]))


# --- fuzzed payloads ------------------------------------------------------------------------------

_EDGES = st.sampled_from([1, 2, 3, 5, 12, 29, 44, 64])
_VALUES = st.sampled_from(["gauss", "pm1", "cancel", "tiny", "huge", "mixed"])


def fuzz_tensor(seed: int, shape: tuple[int, ...], kind: str, density: float) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    if kind == "gauss":
        v = rng.standard_normal(shape)
    elif kind == "pm1":  # 1-bit means of 1–4 peers: values in {±1, ±1/2, ±1/3, …}, many ties
        v = rng.choice([-1.0, -2 / 3, -0.5, -1 / 3, 1 / 3, 0.5, 2 / 3, 1.0], size=shape)
    elif kind == "cancel":  # antisymmetric tiles: exact zeros on the diagonals
        v = rng.standard_normal(shape)
        if len(shape) == 4 and shape[-1] == shape[-2]:
            v = v - np.swapaxes(v, -1, -2)
    elif kind == "tiny":
        v = rng.standard_normal(shape) * 2.0**-140
    elif kind == "huge":
        v = rng.standard_normal(shape) * 2.0**120
    else:
        v = rng.standard_normal(shape) * 2.0 ** rng.integers(-30, 30, size=shape)
    return torch.from_numpy((v * mask).astype(np.float32))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    ny=st.integers(1, 3),
    nx=st.integers(1, 3),
    h=_EDGES,
    w=_EDGES,
    kind=_VALUES,
    density=st.sampled_from([0.002, 0.02, 0.3, 1.0]),
)
def test_fuzzed_tiles_give_the_exact_bits(
    seed: int, ny: int, nx: int, h: int, w: int, kind: str, density: float
) -> None:
    x = fuzz_tensor(seed, (ny, nx, h, w), kind, density)
    assert same_bits(decode_sign(x), decode_sign_exact(x))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 20),
    c=_EDGES,
    kind=_VALUES,
    density=st.sampled_from([0.05, 0.3, 1.0]),
)
def test_fuzzed_chunks_give_the_exact_bits(
    seed: int, rows: int, c: int, kind: str, density: float
) -> None:
    x = fuzz_tensor(seed, (rows, c), kind, density)
    assert same_bits(decode_sign(x), decode_sign_exact(x))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seeds=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=5),
    kind=_VALUES,
    density=st.sampled_from([0.002, 0.02, 0.3]),
    overwrite=st.booleans(),
)
def test_fuzzed_models_give_the_exact_bits_in_one_call(
    seeds: list[int], kind: str, density: float, overwrite: bool
) -> None:
    """`decode_sign_many` (what apply calls): mixed tile shapes and chunks in one call, the exact
    recomputation shared between them, inputs overwritten or not."""
    shapes = [(2, 3, 64, 64), (4, 64), (1, 2, 44, 64), (3, 3, 12, 29), (7, 64), (2, 2, 1, 1)]
    xs = [fuzz_tensor(seed, shapes[seed % len(shapes)], kind, density) for seed in seeds]
    expected = [decode_sign_exact(x) for x in xs]
    outs = decode_sign_many([x.clone() for x in xs] if overwrite else xs, overwrite=overwrite)
    assert all(same_bits(out, want) for out, want in zip(outs, expected, strict=True))


def test_overwrite_writes_the_signs_over_the_aggregate() -> None:
    x = random_encoded((2, 3, 64, 64), seed=5, density=0.01)
    want = decode_sign_exact(x)
    kept = x.clone()
    (out,) = decode_sign_many([x], overwrite=True)
    assert same_bits(out, want) and out.data_ptr() == x.data_ptr()
    (fresh,) = decode_sign_many([kept])
    assert same_bits(fresh, want) and torch.equal(kept, random_encoded((2, 3, 64, 64), 5, 0.01))


def test_apply_gives_the_same_weights_in_one_window_or_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Distro.apply` decodes several tensors per call; the window size changes no bit."""
    from psyche.distro import Distro, DistroConfig, decode_payload, encode_payload
    from psyche.distro import optimizer as optimizer_module

    def run() -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 64))
        distro = Distro(
            model.named_parameters(),
            DistroConfig(
                compression_decay=0.9, compression_topk=8, compression_chunk=64, quantize_1bit=True
            ),
        )
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        data = encode_payload(distro.generate(0.1, 0.0, None))
        distro.apply([decode_payload(data, distro.payload_spec)], 0.05)
        return [p.detach().clone() for p in model.parameters()]

    whole = run()
    monkeypatch.setattr(optimizer_module, "_APPLY_WINDOW", 1)
    assert all(torch.equal(a, b) for a, b in zip(whole, run(), strict=True))


def test_l1_coefficients_cover_the_bound_and_its_two_roundings() -> None:
    for h, w in [(64, 64), (44, 64), (1, 1), (12, 29)]:
        c1, c0 = l1_bound_coefficients(h, w, torch.float32)
        k1 = tile_bound_constant_l1(h, w, U32)
        _, a = tile_bound_constant(h, w, U32, TINY32)
        assert c1 >= k1 * (1 + 4 * U32) and c0 >= a and float(torch.tensor(c0)) == c0


# --- the bound itself, against float evaluations in other orders ----------------------------------


def exact_values(tile: torch.Tensor) -> torch.Tensor:
    """The exact path's grid sum as float64 values (integers times powers of two: exact)."""
    h, w = tile.shape
    ints, exp = exact_rows_times_basis(tile, w)
    values = (ints * torch.pow(2.0, exp.double())).T
    ints2, exp2 = exact_rows_times_basis(values, h)
    return (ints2 * torch.pow(2.0, exp2.double())).T


def grid_basis(size: int) -> torch.Tensor:
    return (int_basis(size, torch.device("cpu")) * 2.0 ** -basis_scale(size)).float()


def serial(a: torch.Tensor, b: torch.Tensor, reverse: bool) -> torch.Tensor:
    """`a @ b` in float32 as one left-to-right (or right-to-left) sum of rounded products."""
    out = torch.zeros(a.shape[0], b.shape[1])
    order = range(a.shape[1] - 1, -1, -1) if reverse else range(a.shape[1])
    for k in order:
        out = out + a[:, k : k + 1] * b[k : k + 1, :]
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    h=_EDGES,
    w=_EDGES,
    kind=st.sampled_from(["gauss", "pm1", "mixed"]),
)
def test_float_error_stays_within_the_bound_in_any_order(
    seed: int, h: int, w: int, kind: str
) -> None:
    tile = fuzz_tensor(seed, (1, 1, h, w), kind, 0.3)[0, 0]
    exact = exact_values(tile)
    k, a = tile_bound_constant(h, w, U32, TINY32)
    frobenius = k * math.sqrt(float((tile.double() ** 2).sum())) + a
    l1 = tile_bound_constant_l1(h, w, U32) * float(tile.double().abs().sum()) + a
    bound = min(frobenius, l1)
    q_h, q_w = grid_basis(h), grid_basis(w)
    evaluations = [
        q_h @ (tile @ q_w.T),
        serial(q_h, serial(tile, q_w.T, False), True),
        serial(q_h, serial(tile, q_w.T, True), False),
    ]
    for approx in evaluations:
        assert float((approx.double() - exact).abs().max()) <= bound


def test_the_bound_constants_are_about_the_papers_sizes() -> None:
    """64×64 tiles: K ≈ 8.5e-6 (2·64·u from the two float sums, 2·2^-24·σ from the grids)."""
    k, a = tile_bound_constant(64, 64, U32, TINY32)
    assert 8.0e-6 < k < 9.0e-6 and a < 1e-30
    k1, _ = row_bound_constant(64, U32, TINY32)
    assert 4.0e-6 < k1 < 4.5e-6
    assert 3.0e-7 < tile_bound_constant_l1(64, 64, U32) < 5.0e-7  # per unit of ‖X‖₁


@pytest.mark.parametrize("overwrite", [False, True])
def test_every_element_undecided_gives_the_exact_bits(
    monkeypatch: pytest.MonkeyPatch, overwrite: bool
) -> None:
    """A bound that decides nothing: every element of every tile is recomputed exactly, so the
    recomputation's per-tile sharing (each distinct tile gathered once, its elements against its
    non-zeros) and the output positions of the output-layout evaluation are checked everywhere,
    with lead dimensions and several tensors of one tile shape in one call."""
    from psyche.distro import sign_bound

    monkeypatch.setattr(sign_bound, "l1_bound_coefficients", lambda h, w, dtype: (2.0**20, 1.0))
    shapes = [(2, 3, 2, 8, 16), (3, 2, 8, 16), (1, 1, 8, 16), (2, 2, 5, 3)]
    xs = [random_encoded(s, seed=n, density=d) for n, s in enumerate(shapes) for d in (0.05, 1.0)]
    expected = [decode_sign_exact(x) for x in xs]
    parts: dict[str, float] = {}
    inputs = [x.clone() for x in xs] if overwrite else xs
    outs = sign_bound.fast_decode_sign_many(inputs, parts, overwrite=overwrite)
    live = sum(int((x.flatten(-2) != 0).any(-1).sum()) * x.shape[-2] * x.shape[-1] for x in xs)
    assert parts["elements"] == sum(x.numel() for x in xs)
    assert parts["undecided"] == live  # all but the all-zero tiles (bound −1: +0 already)
    assert all(same_bits(out, want) for out, want in zip(outs, expected, strict=True))
