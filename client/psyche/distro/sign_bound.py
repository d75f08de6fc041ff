"""The fast path of `decode_sign`: a float inverse DCT with a proven bound, exact where needed.

`dct_exact.decode_sign_exact` evaluates the apply's inverse DCT on integer grids in float64 so that
its sign is the same bits everywhere, at 5–8× the cost of the float matmul it replaced. Almost
every element is far from zero, where any float evaluation already has the right sign. This module
evaluates the same sum as a plain float32 matmul pair (with the grid basis, which float32 holds
exactly) and bounds, per tile (per chunk in 1-D), how far that float value can be from the exact
grid value, whatever the kernel's summation order, blocking or FMA use, and with or without
flush-to-zero. Where `|float value| > bound` the two have the same sign, so the float sign is the
exact sign; the remaining elements (about 1 in 2,000 on random payloads) are recomputed exactly,
column by column, with the exact path's own functions (`psyche.distro.dct_exact`, which `dct`
imports too; the recomputation is in `psyche.distro.sign_parts`). The derivation of the bound is
in docs/distro.md ("Fast path: a float evaluation with a proven bound"); its formulas and their
evaluation on the safe side are in `psyche.distro.float_bound`.

Where float32 matmuls may run in reduced precision (TF32 on CUDA, bf16 on oneDNN), the fast
evaluation runs in float64 with float64's unit roundoff instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from psyche.distro.dct_exact import decode_sign_exact, exact_rows_times_basis, normalise_device
from psyche.distro.float_bound import (
    l1_bound_coefficients,
    precision,
    row_bound_constant,
    slice_bound,
)
from psyche.distro.sign_group import tiles_group
from psyche.distro.sign_parts import (
    Clock,
    Pending,
    Scratch,
    exclude_zero_tiles,
    fill_exact,
    grid_basis,
    grid_columns,
    release_scratch,
    rows_sign_cpu,
    thread_scratch,
    tile_nonzeros,
)

__all__ = ["fast_decode_sign", "fast_decode_sign_many"]

_FINITE_L1 = {torch.float32: 2.0**100, torch.float64: 2.0**1000}
"""Above this float `‖X‖₁` a tile's partial sums might overflow: the tensor takes the exact path."""

_ROWS_EXACT = 1 << 16
"""1-D tensors of one chunk up to this many elements together take the exact path: one float64
matmul costs less there than the float one with its bound and recomputation (0.07 against 0.10
ms at 640 elements, 0.35 against 0.48 at 64k, one CPU thread)."""


def fast_decode_sign(encoded: torch.Tensor, parts: dict[str, float] | None = None) -> torch.Tensor:
    """`decode_sign_exact(encoded)` bit for bit (−0 never occurs; both give +0)."""
    return fast_decode_sign_many([encoded], parts)[0]


def fast_decode_sign_many(
    encoded: Sequence[torch.Tensor],
    parts: dict[str, float] | None = None,
    overwrite: bool = False,
) -> list[torch.Tensor]:
    """`[decode_sign_exact(x) for x in encoded]` bit for bit, with one exact recomputation for all.

    Tiled tensors with sparse coefficients on the CPU (the apply's means) are evaluated together
    per tile shape (`psyche.distro.sign_group`: the fixed costs of about 25 calls per tensor were
    half a small model's apply), the others one by one (float matmuls, bound, sign written
    straight into the output layout); their few undecided elements are collected and recomputed
    exactly together, per tile shape, so a model pays the exact path's fixed costs once.
    1-D tensors of the same chunk are evaluated as one. `parts`, when given, accumulates the
    seconds of the float matmuls (`float`), the bound and comparison (`bound`) and the exact
    recomputation (`exact`), and the counts of recomputed (`undecided`) and all (`elements`)
    elements; on CUDA the seconds are only meaningful after a synchronisation. With `overwrite`,
    a contiguous float32 tiled tensor's signs are written over its own storage (the result is a
    view of it): the apply's aggregates are dead after it, and memory already touched costs no
    page faults, which a model's worth of fresh outputs does.
    """
    clock = Clock(parts)
    scratch = thread_scratch()
    outs: list[torch.Tensor | None] = [None] * len(encoded)
    pending: dict[tuple[int, int, torch.device], list[Pending]] = {}
    rows: dict[tuple[int, torch.device, torch.dtype], list[int]] = {}
    tiles: dict[tuple[int, int, torch.device], list[int]] = {}
    for n, x in enumerate(encoded):
        if x.device.type not in ("cpu", "cuda") or x.dtype == torch.float64:
            outs[n] = decode_sign_exact(x)
        elif x.ndim == 2:
            rows.setdefault((x.shape[-1], x.device, x.dtype), []).append(n)
        else:
            tiles.setdefault((x.shape[-2], x.shape[-1], x.device), []).append(n)
    for key, members in tiles.items():
        shape = [encoded[n] for n in members]
        for n, out, todo in _tiles_of_a_shape(shape, members, clock, overwrite, scratch):
            outs[n] = out
            if todo is not None:
                pending.setdefault(key, []).append(todo)
    for members in rows.values():
        joined = torch.cat([encoded[n] for n in members])
        if joined.device.type == "cpu" and joined.numel() <= _ROWS_EXACT:
            exact = rows_sign_cpu(joined) if joined.dtype == torch.float32 else None
            joined = decode_sign_exact(joined) if exact is None else exact
            clock.add(joined.numel(), joined.numel())  # all recomputed exactly
            clock.lap("exact")
        else:
            joined = _rows_fast(joined, clock)
        sizes = [encoded[n].numel() for n in members]
        for n, out in zip(members, joined.split(sizes), strict=True):
            outs[n] = out
    for (h, w, _), todos in pending.items():
        fill_exact(todos, (h, w))
    clock.lap("exact")
    release_scratch(scratch)
    return [out.to(dtype=x.dtype) for out, x in zip(outs, encoded, strict=True)]  # type: ignore[union-attr]


def _tiles_of_a_shape(
    encoded: list[torch.Tensor],
    members: list[int],
    clock: Clock,
    overwrite: bool,
    scratch: Scratch,
) -> list[tuple[int, torch.Tensor, Pending | None]]:
    """Tensors of one tile shape: those with sparse coefficients on the CPU together
    (`sign_group.tiles_group`), the others (and all of them where some tile's `‖X‖₁` is not
    finite) one by one. Results as (member, signs, undecided elements)."""
    found: list[tuple[int, torch.Tensor, Pending | None]] = []
    group: list[tuple[int, torch.Tensor, torch.Tensor, tuple[np.ndarray, torch.Tensor]]] = []
    for n, enc in zip(members, encoded, strict=True):
        x = enc.to(torch.float32)  # as the exact path widens it: its grids are computed from this
        sparse = _sparse(x, scratch)
        if sparse is None:
            found.append((n, *_tiles_fast(enc, clock, overwrite, scratch, dense=True)))
        else:
            group.append((n, enc, x, sparse))
    if not group:
        return found
    group.sort(key=lambda member: member[2].shape[-3])  # runs of one `bmm` shape (tile columns)
    *_, h, w = encoded[0].shape
    dtype, _, _ = precision(encoded[0].device)
    coefficients = l1_bound_coefficients(h, w, dtype)
    done = tiles_group(
        [g[1] for g in group],
        [g[2] for g in group],
        [g[3] for g in group],
        coefficients,
        _FINITE_L1[dtype],
        dtype,
        clock,
        overwrite,
        scratch,
    )
    if done is None:
        for n, enc, _, _ in group:
            found.append((n, *_tiles_fast(enc, clock, overwrite, scratch)))
        return found
    outs, todo = done
    found.extend((g[0], out, None) for g, out in zip(group, outs, strict=True))
    if todo is not None:  # the group's one record of undecided elements, under any member
        found.append((group[0][0], outs[0], todo))
    return found


def _rows_fast(encoded: torch.Tensor, clock: Clock) -> torch.Tensor:
    """The 1-D case: chunks of `c` as rows, one bound per row (2-norm form)."""
    dtype, u, tiny = precision(encoded.device)
    x = encoded.to(torch.float32)  # as the exact path widens it: its grids are computed from this
    fast = x.to(dtype)
    c = x.shape[-1]
    k, a = row_bound_constant(c, u, tiny)
    approx = fast @ grid_basis(c, dtype, normalise_device(x.device)).T
    clock.lap("float")
    bound, zero = slice_bound(fast, (-1,), k, a, u, tiny)
    undecided = ~(approx.abs() > bound)  # not `<=`: NaN and ∞ (overflow) are undecided too
    out = torch.sign(approx)
    if zero is not None:
        out.masked_fill_(zero, 0.0)
    clock.lap("bound")
    clock.count(undecided)
    if undecided.any():
        rows, cols = undecided.nonzero(as_tuple=True)
        uniq, inv = torch.unique(rows, return_inverse=True)
        ints, _ = exact_rows_times_basis(x[uniq], c)
        out[rows, cols] = torch.sign(ints[inv, cols]).to(out.dtype) + 0.0  # −0 → +0
        clock.lap("exact")
    return out.reshape(-1)


def _tiles_fast(
    encoded: torch.Tensor, clock: Clock, overwrite: bool, scratch: Scratch, dense: bool = False
) -> tuple[torch.Tensor, Pending | None]:
    """Signs of a tiled tensor in `decode`'s layout, and its undecided elements (None if none).

    The first axis is evaluated into the output layout (from the non-zeros on the CPU when they
    are few, else one GEMM over the tiles' rows copied into it), so the second matmul writes `Z̃`
    where the signs go (over the aggregate itself with `overwrite`) and the sign is taken in
    place. `|Z̃| ≤ bound` and the scan for the undecided elements run in NumPy on the CPU
    (torch's broadcast comparison and `nonzero` are slower there). A tensor whose `‖X‖₁` is not
    finite (∞ or NaN coefficients, or a sum that overflows) takes the exact path whole. `dense`:
    the caller found the coefficients too many for the sparse evaluation already.
    """
    dtype, _, _ = precision(encoded.device)
    x = encoded.to(torch.float32)  # as the exact path widens it: its grids are computed from this
    *lead, ny, nx, h, w = x.shape
    rows = math.prod(lead) * ny  # tile rows of the output: (lead…, ty)
    dev = normalise_device(x.device)
    first, l1, spread, sparse = _first_axis(x, rows, dtype, dev, scratch, dense)
    low, high = (float(v) for v in torch.aminmax(l1))
    if not high < _FINITE_L1[dtype]:  # also NaN
        clock.lap("float")
        return decode_sign_exact(encoded).to(dtype), None
    zero = (l1 == 0).nonzero().squeeze(1) if low == 0 else None
    c1, c0 = l1_bound_coefficients(h, w, dtype)
    bound = l1.mul_(c1).add_(c0)
    if zero is not None:
        exclude_zero_tiles(bound, x.reshape(-1, h, w), zero)
    if overwrite and x is encoded and dtype == x.dtype and x.is_contiguous():
        out = x.view(*lead, ny * h, nx * w)  # read no more: `spread` or `sparse` holds them
    else:
        out = torch.empty(*lead, ny * h, nx * w, dtype=dtype, device=x.device)
    approx = out.view(rows, h, nx * w)
    # `bmm` on the basis expanded with stride 0: `matmul` would copy it once per tile row.
    torch.bmm(grid_basis(h, dtype, dev).expand(rows, h, h), first.view(rows, h, nx * w), out=approx)
    clock.lap("float")
    # |Q̂| ≤ 1 keeps every partial sum below (1+γ)²·‖X‖₁ < 2^101: no ∞ or NaN reaches `<=`.
    flat = _undecided(approx.view(rows, h, nx, w), bound.view(rows, 1, nx, 1), scratch)
    approx.sign_()
    clock.lap("bound")
    clock.add(len(flat), approx.numel())
    todo = None
    if len(flat):
        todo = _pending(out, spread, sparse, flat, (h, nx, w))
        clock.lap("exact")
    return out, todo


def _first_axis(
    x: torch.Tensor,
    rows: int,
    dtype: torch.dtype,
    dev: torch.device,
    scratch: Scratch,
    dense: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, tuple[np.ndarray, torch.Tensor] | None]:
    """The first axis of every tile, evaluated into the output layout's rows, with `‖X‖₁` per
    tile; and where the coefficients stay for the exact recomputation: `spread` (the tiles' rows
    copied into the output layout, dense path) or `sparse` (the non-zeros, sparse path)."""
    *_, nx, h, w = x.shape
    size = x.numel()
    first = scratch.get("first", size, dtype, x.device).view(-1, w)
    sparse = None if dense else _sparse(x, scratch)
    if sparse is not None:
        # Few non-zeros (the apply's means): the first axis as a sum of their scaled basis
        # columns, added into the output-layout rows. The sum of a row's terms in whatever order
        # `index_add_` takes (zeros add exact zeros) is a float dot product like the GEMM's, and
        # `‖X‖₁` per tile is the float sum of the same `|x|`.
        nz, values = sparse
        t, a = nz // (h * w), (nz // w) % h
        line = torch.from_numpy((t // nx * h + a) * nx + t % nx)
        wide = values.to(dtype)
        first.zero_().index_add_(
            0,
            line,
            grid_columns(w, dtype, dev)
            .index_select(0, torch.from_numpy(nz % w))
            .mul_(wide[:, None]),
        )
        l1 = wide.new_zeros(rows * nx).index_add_(0, torch.from_numpy(t), wide.abs())
        return first, l1, None, sparse
    # (rows, h, nx, w): the output layout, tile by tile, still holding the coefficients.
    spread = scratch.get("spread", size, dtype, x.device).view(rows, h, nx, w)
    spread.copy_(x.reshape(rows, nx, h, w).transpose(1, 2))
    torch.mm(spread.view(-1, w), grid_basis(w, dtype, dev).T, out=first)  # all tile rows
    magnitude = scratch.get("abs", size, torch.float32, x.device).view(rows * nx, h * w)
    l1 = torch.abs(x.reshape(rows * nx, h * w), out=magnitude).sum(dim=1, dtype=dtype)
    return first, l1, spread, None


def _undecided(
    approx: torch.Tensor, bound: torch.Tensor, scratch: Scratch
) -> np.ndarray | torch.Tensor:
    """Flat indices of `approx`'s elements with `|approx| ≤ bound` (`bound` broadcast): a NumPy
    array on the CPU (its comparison and scan are faster there), a tensor elsewhere."""
    if approx.device.type == "cpu":
        size = approx.numel()
        magnitude = scratch.get("abs_z", size, approx.dtype, approx.device).view(approx.shape)
        mask = scratch.get("mask", size, torch.bool, approx.device).view(approx.shape)
        a = np.abs(approx.numpy(), out=magnitude.numpy()).reshape(-1)
        b = bound.numpy().reshape(-1)  # per (tile row, tile column)
        # Against the largest bound first (a plain scalar comparison), then the candidates
        # against their own tile's: the same elements as the broadcast comparison, cheaper.
        candidates = np.flatnonzero(np.less_equal(a, b.max(), out=mask.numpy().reshape(-1)))
        _, h, nx, w = approx.shape
        tile = candidates // (h * nx * w) * nx + (candidates // w) % nx
        return candidates[a[candidates] <= b[tile]]
    return (approx.abs() <= bound).reshape(-1).nonzero().squeeze(1)


def _sparse(x: torch.Tensor, scratch: Scratch) -> tuple[np.ndarray, torch.Tensor] | None:
    """`x`'s non-zero coefficients (NaN included) as flat indices and values, on the CPU where
    at most 1 in 16 is non-zero (then summing their terms costs less than the dense GEMM)."""
    if x.device.type != "cpu" or not x.is_contiguous():
        return None
    flat = x.view(-1).numpy()
    mask = scratch.get("mask", flat.size, torch.bool, x.device).numpy()
    nz = np.flatnonzero(np.not_equal(flat, 0, out=mask))
    if len(nz) * 16 > flat.size:
        return None
    return nz, torch.from_numpy(flat[nz])


def _pending(
    out: torch.Tensor,
    spread: torch.Tensor | None,
    sparse: tuple[np.ndarray, torch.Tensor] | None,
    flat: np.ndarray | torch.Tensor,
    shape: tuple[int, int, int],
) -> Pending:
    """The undecided elements at `flat` (output-layout positions) of a tensor whose coefficients
    `spread` holds in the output layout (each distinct tile gathered once, as its `h` rows), or
    `sparse` as its non-zeros (each distinct tile's, a range of them). The index arithmetic runs
    in NumPy on the CPU (a few µs per op instead of torch's ~15)."""
    h, nx, w = shape
    j, tx = flat % w, (flat // w) % nx
    i, r = (flat // (nx * w)) % h, flat // (h * nx * w)
    uniq: Any
    tile: Any
    rows: Any
    if isinstance(flat, np.ndarray):
        uniq, tile = np.unique(r * nx + tx, return_inverse=True)
        rows = np.arange(h)
    else:
        uniq, tile = torch.unique(r * nx + tx, return_inverse=True)
        rows = torch.arange(h, device=flat.device)
    t, row, col = (torch.as_tensor(v, device=out.device) for v in (tile, i, j))
    targets = [(out, torch.as_tensor(flat, device=out.device))]
    if sparse is not None:  # tile `t`'s non-zeros are nz[start[t]:end[t]] (nz is ascending)
        values, where = tile_nonzeros(*sparse, uniq, h * w)
        return Pending(values, where, len(uniq), t, row, col, targets)
    assert spread is not None
    lines = ((uniq // nx * h)[:, None] + rows) * nx + (uniq % nx)[:, None]
    lines = torch.as_tensor(lines.reshape(-1), device=out.device)
    tiles = spread.view(-1, w).index_select(0, lines).to(torch.float32)  # as read
    nonzero = _flat_nonzero(tiles != 0)
    return Pending(tiles.view(-1)[nonzero], nonzero, len(uniq), t, row, col, targets)


def _flat_nonzero(mask: torch.Tensor) -> torch.Tensor:
    """Flat indices of `mask`'s non-zero (true) elements, by their bits (NaN counts, ±0 does not;
    NumPy's scan on the CPU: torch's is far slower)."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.reshape(-1).nonzero().squeeze(1)
