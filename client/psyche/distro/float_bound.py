"""The proven error bound of the fast path's float evaluation (`psyche.distro.sign_bound`).

How far a float32 (or float64) matmul pair over the grid basis can be from the exact grid value
of the inverse DCT, per 1-D chunk or per tile, whatever the kernel's summation order, blocking or
FMA use, and with or without flush-to-zero: the formulas (`row_bound_constant`,
`tile_bound_constant`, `tile_bound_constant_l1`) and their evaluation in floats rounded to the safe
side. The derivation is in docs/distro.md ("Fast path: a float evaluation with a proven bound").
"""

from __future__ import annotations

import functools
import math

import torch

from psyche.distro.dct_exact import basis_scale, coefficient_bits, int_basis

__all__ = [
    "basis_max",
    "basis_norms",
    "gamma",
    "l1_bound_coefficients",
    "norm_upper",
    "precision",
    "round_up_to",
    "row_bound_constant",
    "scalar_up",
    "slice_bound",
    "tile_bound_constant",
    "tile_bound_constant_l1",
]

_SAFETY = 1.0 + 2.0**-20
"""Covers the float64 rounding of the bound's own evaluation (a few dozen operations of 2^-53)."""


@functools.lru_cache(maxsize=128)
def basis_max(size: int) -> float:
    """`μ`: the largest `|Q̂|` entry of the grid basis (exact)."""
    rows = int_basis(size, torch.device("cpu")).to(torch.int64).tolist()
    return max(abs(q) for row in rows for q in row) * 2.0 ** -basis_scale(size)


@functools.lru_cache(maxsize=128)
def basis_norms(size: int) -> tuple[float, float]:
    """`(ρ, σ)`: upper bounds on the largest row 2-norm and row 1-norm of the grid basis `Q̂`.

    `Q̂ = Q·2^-e` with `Q` integers, so the row sums are exact integers; `ρ` rounds the square
    root up (`isqrt + 1`). Both are exact powers-of-two multiples of integers below 2^53.
    """
    rows = int_basis(size, torch.device("cpu")).to(torch.int64).tolist()
    scale = 2.0 ** -basis_scale(size)
    l1 = max(sum(abs(q) for q in row) for row in rows)
    l2sq = max(sum(q * q for q in row) for row in rows)
    return (math.isqrt(l2sq) + 1) * scale, l1 * scale


def gamma(n: int, u: float) -> float:
    """Higham's γ_n = n·u / (1 − n·u): the relative error bound of an n-term dot product."""
    if n * u >= 0.5:
        raise ValueError(f"dot products of {n} terms are too long for unit roundoff {u}")
    return n * u / (1 - n * u)


def row_bound_constant(size: int, u: float, tiny: float) -> tuple[float, float]:
    """`(K, A)` with `|float − exact| ≤ K·‖x‖₂ + A` for a 1-D chunk `x` of length `size`."""
    rho, sigma = basis_norms(size)
    k = gamma(size, u) * rho + 2.0 ** -coefficient_bits(size) * sigma
    return k * _SAFETY, 6 * size * tiny * _SAFETY


def tile_bound_constant(h: int, w: int, u: float, tiny: float) -> tuple[float, float]:
    """`(K, A)` with `|float − exact| ≤ K·‖X‖_F + A` for every element of an `h × w` tile."""
    rho_h, sigma_h = basis_norms(h)
    rho_w, sigma_w = basis_norms(w)
    g_h, g_w = gamma(h, u), gamma(w, u)
    grid_h, grid_w = 2.0 ** -coefficient_bits(h), 2.0 ** -coefficient_bits(w)
    alpha_w = g_w * rho_w + grid_w * sigma_w  # first axis: float and grid error per ‖row‖₂
    k = (
        rho_h * alpha_w
        + g_h * rho_h * rho_w * (1 + g_w)
        + grid_h * sigma_h * rho_w * (1 + (math.isqrt(w) + 1) * grid_w)
    )
    return k * _SAFETY, 2 * tiny * (3 * h + 3 * w * sigma_h) * _SAFETY


def tile_bound_constant_l1(h: int, w: int, u: float) -> float:
    """`K₁` with `|float − exact| ≤ K₁·‖X‖₁ + A` (same `A`): tighter for sparse tiles."""
    mu_h, mu_w = basis_max(h), basis_max(w)
    _, sigma_h = basis_norms(h)
    _, sigma_w = basis_norms(w)
    g_h, g_w = gamma(h, u), gamma(w, u)
    grid_h, grid_w = 2.0 ** -coefficient_bits(h), 2.0 ** -coefficient_bits(w)
    k = (
        mu_h * (g_w * mu_w + grid_w * sigma_w)
        + g_h * mu_h * mu_w * (1 + g_w)
        + grid_h * sigma_h * mu_w * (1 + w * grid_w)
    )
    return k * _SAFETY


def precision(device: torch.device) -> tuple[torch.dtype, float, float]:
    """`(dtype, unit roundoff, underflow threshold)` of the fast evaluation on `device`."""
    reduced = torch.get_float32_matmul_precision() != "highest"
    if device.type == "cuda":
        reduced = reduced or torch.backends.cuda.matmul.allow_tf32
    if reduced:
        return torch.float64, 2.0**-53, 2.0**-1022
    return torch.float32, 2.0**-24, 2.0**-126


def norm_upper(sq: torch.Tensor, n: int, u: float, tiny: float) -> torch.Tensor:
    """Upper bounds on `‖x‖₂`, as float64, from `sq`, a float sum of the `n` squares of a slice.

    Each square errs by `u` relatively and `tiny` absolutely (underflow, flush-to-zero); a sum
    of `n` non-negative terms in any order by `γ_{n−1}`. So `Σx² ≤ (sq + 2n·tiny) / (1 − γ_{n+1})`.
    """
    s = sq.to(torch.float64)
    return ((s + 2 * n * tiny) / (1 - gamma(n + 1, u))).sqrt_() * (1 + 2.0**-40)


def round_up_to(bound: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`bound` (float64) in `dtype`, rounded up so the comparison stays on the safe side."""
    low = bound.to(dtype)
    return torch.where(low.to(torch.float64) < bound, low.nextafter(low.new_tensor(math.inf)), low)


def scalar_up(value: float, dtype: torch.dtype) -> float:
    """`value` rounded up to the nearest number of `dtype` (a Python float holding it)."""
    return float(round_up_to(torch.tensor(value, dtype=torch.float64), dtype))


@functools.lru_cache(maxsize=128)
def l1_bound_coefficients(h: int, w: int, dtype: torch.dtype) -> tuple[float, float]:
    """`(c₁, c₀)`, numbers of `dtype`, such that `fl(fl(s₁·c₁) + c₀)` bounds `|Z̃ − Z|` for a tile
    whose float sum of `|x|` is `s₁`, whatever the two roundings (docs/distro.md, "Evaluating the
    bound"): `c₁ ≥ K₁'·(1+4u)`, `c₀ ≥ (K₁'·nτ + A + 2τ)·(1+4u)` with `K₁' = K₁/(1 − γ_n)`."""
    u, tiny = (2.0**-53, 2.0**-1022) if dtype == torch.float64 else (2.0**-24, 2.0**-126)
    n = h * w
    _, a = tile_bound_constant(h, w, u, tiny)
    k1 = tile_bound_constant_l1(h, w, u) / (1 - gamma(n, u)) * (1 + 2.0**-40)
    grow = (1 + 4 * u) * (1 + 2.0**-40)  # the two roundings, and these few float64 operations
    return scalar_up(k1 * grow, dtype), scalar_up((k1 * n * tiny + a + 2 * tiny) * grow, dtype)


def slice_bound(
    x: torch.Tensor, dims: tuple[int, ...], k: float, a: float, u: float, tiny: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-slice bound `K·‖x‖₂ + A` in `x`'s dtype, rounded up, and the all-zero slices (None if
    there are none). Their float value is exactly ±0 like the exact one, so their bound is −1."""
    n = math.prod(x.shape[d] for d in dims)
    sq = (x * x).sum(dim=dims, keepdim=True)
    bound = round_up_to(norm_upper(sq, n, u, tiny) * k + a, x.dtype)
    zero = sq == 0  # a zero sum of squares may be underflow: only then look at the values
    if zero.any():
        zero &= x.abs().amax(dim=dims, keepdim=True) == 0
        if zero.any():
            return bound.masked_fill(zero, -1.0), zero
    return bound, None
