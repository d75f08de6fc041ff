"""The fast path of `decode_sign`: a float inverse DCT with a proven bound, exact where needed.

`dct.decode_sign_exact` evaluates the apply's inverse DCT on integer grids in float64 so that its
sign is the same bits everywhere, at 5–8× the cost of the float matmul it replaced. Almost every
element is far from zero, where any float evaluation already has the right sign. This module
evaluates the same sum as a plain float32 matmul pair (with the grid basis, which float32 holds
exactly) and bounds, per tile (per chunk in 1-D), how far that float value can be from the exact
grid value, whatever the kernel's summation order, blocking or FMA use, and with or without
flush-to-zero. Where `|float value| > bound` the two have the same sign, so the float sign is
the exact sign; the remaining elements (about 1 in 2,000 on random payloads) are recomputed
exactly, column by column, with the exact path's own functions. The derivation of the bound is in
docs/distro.md ("Fast path: a float evaluation with a proven bound"); `tile_bound_constant` and
`row_bound_constant` are its formulas.

Where float32 matmuls may run in reduced precision (TF32 on CUDA, bf16 on oneDNN), the fast
evaluation runs in float64 with float64's unit roundoff instead.
"""

from __future__ import annotations

import functools
import math
import time

import torch

from psyche.distro.dct import (
    _exact_rows_times_basis,
    _int_basis,
    _normalise,
    _pow2,
    _to_grid,
    basis_scale,
    coefficient_bits,
    decode_sign_exact,
)

__all__ = [
    "fast_decode_sign",
    "row_bound_constant",
    "tile_bound_constant",
    "tile_bound_constant_l1",
]

_COLUMNS_PER_BATCH = 1 << 14
"""Flagged columns recomputed exactly per batch: bounds the gathered tiles' memory."""
_SAFETY = 1.0 + 2.0**-20
"""Covers the float64 rounding of the bound's own evaluation (a few dozen operations of 2^-53)."""


@functools.lru_cache(maxsize=128)
def basis_max(size: int) -> float:
    """`μ`: the largest `|Q̂|` entry of the grid basis (exact)."""
    rows = _int_basis(size, torch.device("cpu")).to(torch.int64).tolist()
    return max(abs(q) for row in rows for q in row) * 2.0 ** -basis_scale(size)


@functools.lru_cache(maxsize=128)
def basis_norms(size: int) -> tuple[float, float]:
    """`(ρ, σ)`: upper bounds on the largest row 2-norm and row 1-norm of the grid basis `Q̂`.

    `Q̂ = Q·2^-e` with `Q` integers, so the row sums are exact integers; `ρ` rounds the square
    root up (`isqrt + 1`). Both are exact powers-of-two multiples of integers below 2^53.
    """
    rows = _int_basis(size, torch.device("cpu")).to(torch.int64).tolist()
    scale = 2.0 ** -basis_scale(size)
    l1 = max(sum(abs(q) for q in row) for row in rows)
    l2sq = max(sum(q * q for q in row) for row in rows)
    return (math.isqrt(l2sq) + 1) * scale, l1 * scale


def _gamma(n: int, u: float) -> float:
    """Higham's γ_n = n·u / (1 − n·u): the relative error bound of an n-term dot product."""
    if n * u >= 0.5:
        raise ValueError(f"dot products of {n} terms are too long for unit roundoff {u}")
    return n * u / (1 - n * u)


def row_bound_constant(size: int, u: float, tiny: float) -> tuple[float, float]:
    """`(K, A)` with `|float − exact| ≤ K·‖x‖₂ + A` for a 1-D chunk `x` of length `size`."""
    rho, sigma = basis_norms(size)
    k = _gamma(size, u) * rho + 2.0 ** -coefficient_bits(size) * sigma
    return k * _SAFETY, 6 * size * tiny * _SAFETY


def tile_bound_constant(h: int, w: int, u: float, tiny: float) -> tuple[float, float]:
    """`(K, A)` with `|float − exact| ≤ K·‖X‖_F + A` for every element of an `h × w` tile."""
    rho_h, sigma_h = basis_norms(h)
    rho_w, sigma_w = basis_norms(w)
    g_h, g_w = _gamma(h, u), _gamma(w, u)
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
    g_h, g_w = _gamma(h, u), _gamma(w, u)
    grid_h, grid_w = 2.0 ** -coefficient_bits(h), 2.0 ** -coefficient_bits(w)
    k = (
        mu_h * (g_w * mu_w + grid_w * sigma_w)
        + g_h * mu_h * mu_w * (1 + g_w)
        + grid_h * sigma_h * mu_w * (1 + w * grid_w)
    )
    return k * _SAFETY


def _precision(device: torch.device) -> tuple[torch.dtype, float, float]:
    """`(dtype, unit roundoff, underflow threshold)` of the fast evaluation on `device`."""
    reduced = torch.get_float32_matmul_precision() != "highest"
    if device.type == "cuda":
        reduced = reduced or torch.backends.cuda.matmul.allow_tf32
    if reduced:
        return torch.float64, 2.0**-53, 2.0**-1022
    return torch.float32, 2.0**-24, 2.0**-126


def _norm_upper(sq: torch.Tensor, n: int, u: float, tiny: float) -> torch.Tensor:
    """Upper bounds on `‖x‖₂`, as float64, from `sq`, a float sum of the `n` squares of a slice.

    Each square errs by `u` relatively and `tiny` absolutely (underflow, flush-to-zero); a sum
    of `n` non-negative terms in any order by `γ_{n−1}`. So `Σx² ≤ (sq + 2n·tiny) / (1 − γ_{n+1})`.
    """
    s = sq.to(torch.float64)
    return ((s + 2 * n * tiny) / (1 - _gamma(n + 1, u))).sqrt_() * (1 + 2.0**-40)


def _round_up_to(bound: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`bound` (float64) in `dtype`, rounded up so the comparison stays on the safe side."""
    low = bound.to(dtype)
    return torch.where(low.to(torch.float64) < bound, low.nextafter(low.new_tensor(math.inf)), low)


def _bound(
    x: torch.Tensor,
    dims: tuple[int, ...],
    k: float,
    a: float,
    u: float,
    tiny: float,
    k1: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-slice bound `K·‖x‖ + A` in `x`'s dtype, rounded up, and the all-zero slices (None if
    there are none). Their float value is exactly ±0 like the exact one, so their bound is −1."""
    n = math.prod(x.shape[d] for d in dims)
    sq = (x * x).sum(dim=dims, keepdim=True)
    worst = _norm_upper(sq, n, u, tiny) * k
    if k1 is not None:  # ‖X‖₁ from a float sum of n exact |x|: ≤ (s + n·tiny) / (1 − γ_n)
        l1 = x.abs().sum(dim=dims, keepdim=True).to(torch.float64)
        worst = torch.minimum(worst, (l1 + n * tiny) / (1 - _gamma(n, u)) * (1 + 2.0**-40) * k1)
    bound = _round_up_to(worst + a, x.dtype)
    zero = sq == 0  # a zero sum of squares may be underflow: only then look at the values
    if zero.any():
        zero &= x.abs().amax(dim=dims, keepdim=True) == 0
        if zero.any():
            return bound.masked_fill(zero, -1.0), zero
    return bound, None


def _signs(approx: torch.Tensor, zero: torch.Tensor | None) -> torch.Tensor:
    """`sign(approx)`, with +0 (not −0) in all-zero slices as the exact path gives."""
    out = torch.sign(approx)
    return out if zero is None else out.masked_fill_(zero, 0.0)


def fast_decode_sign(encoded: torch.Tensor, parts: dict[str, float] | None = None) -> torch.Tensor:
    """`decode_sign_exact(encoded)` bit for bit (−0 never occurs; both give +0).

    `parts`, when given, accumulates the seconds of the float matmuls (`float`), the bound and
    comparison (`bound`) and the exact recomputation (`exact`), and the count of recomputed
    elements (`undecided`) and of all elements (`elements`); on CUDA the seconds are only
    meaningful after a synchronisation, so benches time the CPU.
    """
    clock = _Clock(parts)
    device = encoded.device
    if device.type not in ("cpu", "cuda"):
        return decode_sign_exact(encoded)
    dtype, u, tiny = _precision(device)
    x = encoded.to(torch.float32)  # as the exact path widens it: its grids are computed from this
    fast = x.to(dtype)
    if x.ndim == 2:
        c = x.shape[-1]
        k, a = row_bound_constant(c, u, tiny)
        basis = _int_basis(c, _normalise(device)).to(dtype) * 2.0 ** -basis_scale(c)
        approx = fast @ basis.T
        clock.lap("float")
        bound, zero = _bound(fast, (-1,), k, a, u, tiny)
        undecided = ~(approx.abs() > bound)
        out = _signs(approx, zero)
        clock.lap("bound")
        clock.count(undecided)
        if undecided.any():
            rows, cols = undecided.nonzero(as_tuple=True)
            uniq, inv = torch.unique(rows, return_inverse=True)
            ints, _ = _exact_rows_times_basis(x[uniq], c)
            out[rows, cols] = torch.sign(ints[inv, cols]).to(out.dtype) + 0.0  # −0 → +0
        clock.lap("exact")
        return out.reshape(-1).to(dtype=encoded.dtype)
    *lead, ny, nx, h, w = x.shape
    tiles_x = x.reshape(-1, h, w)
    tiles = fast.reshape(-1, h, w)
    k, a = tile_bound_constant(h, w, u, tiny)
    dev = _normalise(device)
    q_h = _int_basis(h, dev).to(dtype) * 2.0 ** -basis_scale(h)
    q_w = _int_basis(w, dev).to(dtype) * 2.0 ** -basis_scale(w)
    # The first axis summed first, as the bound (and the exact path) has it.
    approx = q_h @ (tiles @ q_w.T)
    clock.lap("float")
    k1 = tile_bound_constant_l1(h, w, u)
    bound, zero = _bound(tiles, (-2, -1), k, a, u, tiny, k1)
    undecided = ~(approx.abs() > bound)  # not `<=`: NaN and ∞ (overflow) are undecided too
    out = _signs(approx, zero)
    clock.lap("bound")
    clock.count(undecided)
    if undecided.any():
        _fill_exact(out, tiles_x, undecided)
    clock.lap("exact")
    return (
        out.reshape(*lead, ny, nx, h, w)
        .transpose(-3, -2)
        .reshape(*lead, ny * h, nx * w)
        .to(dtype=encoded.dtype)
    )


class _Clock:
    """Per-part seconds for benches; does nothing without a `parts` dict."""

    def __init__(self, parts: dict[str, float] | None) -> None:
        self.parts = parts
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        if self.parts is not None:
            now = time.perf_counter()
            self.parts[name] = self.parts.get(name, 0.0) + now - self.last
            self.last = now

    def count(self, undecided: torch.Tensor) -> None:
        if self.parts is not None:
            self.parts["undecided"] = self.parts.get("undecided", 0) + int(undecided.sum())
            self.parts["elements"] = self.parts.get("elements", 0) + undecided.numel()


def _fill_exact(out: torch.Tensor, tiles: torch.Tensor, undecided: torch.Tensor) -> None:
    """Overwrite `out`'s undecided elements with the exact grid sign, one tile column at a time.

    Element `(t, i, j)` of the exact sum needs column `j` of tile `t` after the first axis:
    `h` exact dot products over the tile's rows (the same grids as `decode_sign_exact`, whose
    rows depend on nothing else), then that column's grid and its sum along the first axis.
    """
    _, h, w = tiles.shape
    t, i, j = undecided.nonzero(as_tuple=True)
    uniq, inv = torch.unique(t * w + j, return_inverse=True)
    q_w = _int_basis(w, _normalise(tiles.device))
    shift = basis_scale(w)
    columns = []
    for start in range(0, uniq.numel(), _COLUMNS_PER_BATCH):
        key = uniq[start : start + _COLUMNS_PER_BATCH]
        ints, exp = _to_grid(tiles[key // w], coefficient_bits(w))  # [C, h, w], exp [C, h, 1]
        first = torch.bmm(ints, q_w[key % w].unsqueeze(-1))  # integers ≤ 2^52: exact
        values = first.mul_(_pow2(exp - shift)).squeeze(-1)  # [C, h], a column per row
        second, _ = _exact_rows_times_basis(values, h)
        columns.append(torch.sign(second))
    exact = torch.cat(columns)
    out[t, i, j] = exact[inv, i].to(out.dtype) + 0.0
