"""The fast path of `decode_sign` for a tile shape's sparse tensors on the CPU, evaluated together.

`psyche.distro.sign_bound` evaluates a tensor in about 25 torch and NumPy calls of 5–20 µs each
besides its two passes of arithmetic; on a small model's tensors those fixed costs were half the
apply. Here every tensor of one tile shape whose coefficients are sparse (the apply's means) shares
one first-axis evaluation from the concatenated non-zeros, one `‖X‖₁` and bound per tile, one
per-tile comparison of the candidates and one gathering of the undecided elements' tiles; only
the second-axis matmul and the dense scans stay per tensor, where each runs over its own
(cache-resident) output. The float values, bounds and comparisons are those of the per-tensor
path element for element, so the decided signs and the undecided set are the same.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np
import torch

from psyche.distro.sign_parts import (
    Clock,
    Pending,
    Scratch,
    exclude_zero_tiles,
    grid_basis,
    grid_columns,
    tile_nonzeros,
)

__all__ = ["tiles_group"]


def tiles_group(
    encoded: Sequence[torch.Tensor],
    xs: Sequence[torch.Tensor],
    sparse: Sequence[tuple[np.ndarray, torch.Tensor]],
    coefficients: tuple[float, float],
    finite: float,
    dtype: torch.dtype,
    clock: Clock,
    overwrite: bool,
    scratch: Scratch,
) -> tuple[list[torch.Tensor], Pending | None] | None:
    """Signs of tensors `encoded` of one tile shape (`xs`: them widened to float32, contiguous;
    `sparse`: their non-zeros as flat indices and values), in `decode`'s layout, and their
    undecided elements (None if none); None without output when some tile's `‖X‖₁` is not below
    `finite`, for the per-tensor path to take each tensor (whole ones go exact). `coefficients`
    are `(c₁, c₀)` of the bound `c₁·‖X‖₁ + c₀` in `dtype`, the evaluation's type."""
    h, w = xs[0].shape[-2:]
    offsets = np.cumsum([0] + [x.numel() for x in xs])
    nxs = np.array([x.shape[-3] for x in xs])
    nz = np.concatenate([n + off for (n, _), off in zip(sparse, offsets, strict=False)])
    owner = np.repeat(np.arange(len(xs)), [len(n) for n, _ in sparse])
    values = torch.cat([v for _, v in sparse])  # float32, as the exact path reads them
    wide = values.to(dtype)
    tiles = int(offsets[-1]) // (h * w)
    terms, l1 = _first_axis(nz, wide, (h, w), tiles)
    low, high = (float(v) for v in torch.aminmax(l1))
    if not high < finite:  # also NaN
        return None
    bound = l1.mul_(coefficients[0]).add_(coefficients[1])
    if low == 0:
        _exclude_zero_tiles(bound, xs, offsets // (h * w), (l1 == 0).nonzero().squeeze(1))
    clock.lap("float")
    b = bound.numpy()
    ends = np.cumsum([0] + [len(n) for n, _ in sparse])
    line, basis_rows, slots = _compact(nz, (h, w), tiles)
    if basis_rows is None:  # rows of many non-zeros: the tile rows' dense `bmm` costs less
        line = _row_lines(nz, owner, offsets, nxs, (h, w))
    group = _Group(
        offsets, ends, line, terms, (h, w), b.max(initial=-1.0), clock, slots, basis_rows
    )
    outs, flat = _evaluate(group, encoded, xs, nxs, b, overwrite, scratch)
    clock.add(len(flat), int(offsets[-1]))
    if not len(flat):
        return outs, None
    todo = _pending(outs, flat, nz, values, offsets, nxs, (h, w))
    clock.lap("exact")
    return outs, todo


@dataclasses.dataclass
class _Group:
    """A tile shape's tensors concatenated: their offsets, the ranges of their non-zeros, each
    non-zero's row (of `w`: in the output layout, or in the tile layout's kept rows) in the
    concatenation and its first-axis terms; the largest bound; the parts' clock."""

    offsets: np.ndarray
    ends: np.ndarray
    line: np.ndarray
    terms: torch.Tensor
    shape: tuple[int, int]
    peak: np.floating  # the largest bound: a scalar comparison finds the candidates
    clock: Clock
    slots: int  # tile layout: rows kept per tile (its non-zero rows, padded with zero rows)
    basis_rows: np.ndarray | None  # tile layout: the basis column of each kept row (`h`: zero)


def _evaluate(
    group: _Group,
    encoded: Sequence[torch.Tensor],
    xs: Sequence[torch.Tensor],
    nxs: np.ndarray,
    b: np.ndarray,
    overwrite: bool,
    scratch: Scratch,
) -> tuple[list[torch.Tensor], np.ndarray]:
    """The second axis of the group batch by batch: the signs in `decode`'s layout (written over
    the inputs where `overwrite` allows), and the undecided elements against their own tile's
    bound (`b`), as ascending output-layout positions in the tensors concatenated."""
    (h, w), offsets, clock = group.shape, group.offsets, group.clock
    dtype = group.terms.dtype
    outs: list[torch.Tensor] = []
    candidates: list[np.ndarray] = []
    magnitudes: list[np.ndarray] = []
    for k0, k1 in _batches(offsets, nxs, same_columns=group.basis_rows is None):
        targets = [
            x.view(-1) if overwrite and x is enc and dtype == x.dtype else None
            for enc, x in zip(encoded[k0:k1], xs[k0:k1], strict=True)
        ]
        if group.basis_rows is None:
            found, magnitude = _second_axis(group, (k0, k1), int(nxs[k0]), targets, scratch, outs)
        else:
            found, magnitude = _second_axis_tiles(group, (k0, k1), nxs, targets, scratch, outs)
        clock.lap("bound")
        candidates.append(found)
        magnitudes.append(magnitude)
    for n, x in enumerate(xs):
        *lead, ny, nx, _, _ = x.shape
        outs[n] = outs[n].view(*lead, ny * h, nx * w)
    clock.lap("bound")
    # The candidates against their own tile's bound, all tensors at once.
    found = np.concatenate(candidates)
    if group.basis_rows is None:  # output-layout positions
        k, _, tile = _place(found, offsets, nxs, h, w)
        return outs, found[np.concatenate(magnitudes) <= b[offsets[k] // (h * w) + tile]]
    # Tile-major positions: the tiles are numbered in order.
    flat = found[np.concatenate(magnitudes) <= b[found // (h * w)]]
    return outs, np.sort(_to_layout(flat, offsets, nxs, h, w))


_BATCH = 1 << 18
"""Elements per batch of tensors: several small tensors share one call of each step, while the
first axis and `Z̃` stay in the cache between the steps (a whole group's did not, and cost more
in misses than the calls it saved)."""


_KEPT_ROWS = 0.5
"""The most rows of a tile the tile layout keeps, as a share: one small product per tile costs
about twice the tile rows' `bmm` per multiply-add (64×64 tiles, one CPU thread), so it pays
where it keeps at most about half of them."""


def _batches(offsets: np.ndarray, nxs: np.ndarray, same_columns: bool) -> list[tuple[int, int]]:
    """Runs of consecutive tensors with at most `_BATCH` elements together (or one larger
    tensor), and with `same_columns` the same tile columns (one `bmm` shape of tile rows)."""
    runs: list[tuple[int, int]] = []
    start = 0
    for k in range(1, len(nxs) + 1):
        if (
            k == len(nxs)
            or (same_columns and nxs[k] != nxs[start])
            or offsets[k + 1] - offsets[start] > _BATCH
        ):
            runs.append((start, k))
            start = k
    return runs


def _second_axis(
    group: _Group,
    batch: tuple[int, int],
    nx: int,
    targets: list[torch.Tensor | None],
    scratch: Scratch,
    outs: list[torch.Tensor],
) -> tuple[np.ndarray, np.ndarray]:
    """`Z̃` of tensors `batch` (their first axis, then one `bmm`), its signs appended to `outs`
    (flat; written over `targets`' storage where given), and the candidates for the undecided
    elements: positions (in the concatenation) with `|Z̃|` at most the largest bound, and `|Z̃|`
    there."""
    (h, w), (k0, k1) = group.shape, batch
    start, stop = int(group.offsets[k0]), int(group.offsets[k1])
    dtype = group.terms.dtype
    first = scratch.get("first", stop - start, dtype, group.terms.device).view(-1, w).zero_()
    part = slice(int(group.ends[k0]), int(group.ends[k1]))
    first.index_add_(0, torch.from_numpy(group.line[part] - start // w), group.terms[part])
    rows = (stop - start) // (h * nx * w)
    magnitude = scratch.get("abs_z", stop - start, dtype, first.device)
    several = k1 - k0 > 1
    if several:  # `Z̃` in the buffer of `|Z̃|`, signed into each tensor's output before `abs`
        approx = magnitude
    elif targets[0] is None:
        approx = torch.empty(stop - start, dtype=dtype, device=first.device)
    else:
        approx = targets[0]
    # `bmm` on the basis expanded with stride 0: `matmul` would copy it once per tile row.
    basis = grid_basis(h, dtype, first.device).expand(rows, h, h)
    torch.bmm(basis, first.view(rows, h, nx * w), out=approx.view(rows, h, nx * w))
    group.clock.lap("float")
    if several:
        for k, target in zip(range(k0, k1), targets, strict=True):
            piece = approx[int(group.offsets[k]) - start : int(group.offsets[k + 1]) - start]
            outs.append(piece.sign() if target is None else torch.sign(piece, out=target))
    a = np.abs(approx.numpy(), out=magnitude.numpy())
    mask = scratch.get("mask", stop - start, torch.bool, first.device).numpy()
    found = np.flatnonzero(np.less_equal(a, group.peak, out=mask))
    if not several:
        outs.append(approx.sign_())
    return found + start, a[found]


def _second_axis_tiles(
    group: _Group,
    batch: tuple[int, int],
    nxs: np.ndarray,
    targets: list[torch.Tensor | None],
    scratch: Scratch,
    outs: list[torch.Tensor],
) -> tuple[np.ndarray, np.ndarray]:
    """`_second_axis` in the tile layout: each tile's kept rows (its non-zero rows of the first
    axis) times their basis columns, one small product per tile (about a third of the tile
    rows' multiply-adds at 20 of 64 rows; the zero rows left out add exact zeros to each float
    dot product, so the bound holds), `Z̃` tile by tile in a buffer and its signs transposed into
    the output layout. Candidates as tile-major positions in the concatenation."""
    (h, w), (k0, k1), r = group.shape, batch, group.slots
    start, stop = int(group.offsets[k0]), int(group.offsets[k1])
    t0, t1 = start // (h * w), stop // (h * w)
    dtype, device = group.terms.dtype, group.terms.device
    first = scratch.get("first", (t1 - t0) * r * w, dtype, device).view(-1, w).zero_()
    part = slice(int(group.ends[k0]), int(group.ends[k1]))
    first.index_add_(0, torch.from_numpy(group.line[part] - t0 * r), group.terms[part])
    assert group.basis_rows is not None
    picked = torch.from_numpy(group.basis_rows[t0 * r : t1 * r])
    basis = scratch.get("basis", (t1 - t0) * r * h, dtype, device).view(-1, h)
    torch.index_select(_padded_columns(h, dtype, device), 0, picked, out=basis)
    approx = scratch.get("abs_z", stop - start, dtype, device)
    tiles = basis.view(t1 - t0, r, h).transpose(1, 2)  # (tile, i, kept row): Q̂ at those rows
    torch.bmm(tiles, first.view(t1 - t0, r, w), out=approx.view(t1 - t0, h, w))
    group.clock.lap("float")
    for k, target in zip(range(k0, k1), targets, strict=True):
        piece = approx[int(group.offsets[k]) - start : int(group.offsets[k + 1]) - start]
        nx = int(nxs[k])
        z = piece.view(-1, nx, h, w).transpose(1, 2)
        out = (
            torch.empty(z.shape, dtype=dtype, device=device)
            if target is None
            else target.view(z.shape)
        )
        outs.append(torch.sign(z, out=out).view(-1))
    a = np.abs(approx.numpy(), out=approx.numpy())
    mask = scratch.get("mask", stop - start, torch.bool, device).numpy()
    found = np.flatnonzero(np.less_equal(a, group.peak, out=mask))
    return found + start, a[found]


@functools.lru_cache(maxsize=32)
def _padded_columns(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`Q̂ᵀ` with a zero row appended: a padding row's basis column."""
    columns = grid_columns(size, dtype, device)
    return torch.cat([columns, columns.new_zeros(1, size)])


def _first_axis(
    nz: np.ndarray, wide: torch.Tensor, shape: tuple[int, int], tiles: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first axis of every tile as terms to add into rows: each non-zero's scaled basis
    column (`nz`, flat in the tensors concatenated; `wide`, their values in the evaluation's
    type), and the float sum of `|x|` for each of the `tiles` tiles. Added in order, each row's
    sum is the per-tensor path's: a float dot product over the row's non-zeros (zeros add exact
    zeros)."""
    h, w = shape
    terms = grid_columns(w, wide.dtype, wide.device).index_select(0, torch.from_numpy(nz % w))
    terms.mul_(wide[:, None])
    l1 = wide.new_zeros(tiles)
    return terms, l1.index_add_(0, torch.from_numpy(nz // (h * w)), wide.abs())


def _row_lines(
    nz: np.ndarray, owner: np.ndarray, offsets: np.ndarray, nxs: np.ndarray, shape: tuple[int, int]
) -> np.ndarray:
    """Each non-zero's row (of `w`) in the tensors' output layouts concatenated (`owner`: its
    tensor), where the first axis goes for the tile rows' `bmm`."""
    h, w = shape
    local = nz - offsets[owner]
    nx = nxs[owner]
    t, a = local // (h * w), (local // w) % h
    return offsets[owner] // w + (t // nx * h + a) * nx + t % nx


def _compact(
    nz: np.ndarray, shape: tuple[int, int], tiles: int
) -> tuple[np.ndarray, np.ndarray | None, int]:
    """The tile layout's kept rows: each tile keeps its rows with a non-zero (an apply's mean has
    about 20 of 64), padded to the most any tile has (`slots`). Returns each non-zero's kept row,
    the basis column (`h` for a padding row) of every kept row, and `slots`; no basis columns
    where it would keep more than `_KEPT_ROWS` of the rows (the tile rows' `bmm` costs less)."""
    h, w = shape
    key = nz // w  # tile · h + row, ascending
    new = np.empty(len(key), dtype=bool)
    new[:1] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    rows = key[new]
    tile = rows // h
    # A row's slot: its rank among its tile's rows (rows ascending, so a tile's rows are a run).
    number = np.arange(len(rows))
    run = np.empty(len(rows), dtype=bool)
    run[:1] = True
    np.not_equal(tile[1:], tile[:-1], out=run[1:])
    slot = number - np.maximum.accumulate(np.where(run, number, 0))
    slots = int(slot.max(initial=0)) + 1
    if slots > _KEPT_ROWS * h:
        return key, None, slots
    kept = tile * slots + slot
    basis_rows = np.full(tiles * slots, h)
    basis_rows[kept] = rows % h
    return kept[np.cumsum(new) - 1], basis_rows, slots


def _to_layout(
    flat: np.ndarray, offsets: np.ndarray, nxs: np.ndarray, h: int, w: int
) -> np.ndarray:
    """Tile-major positions in the tensors concatenated → output-layout positions."""
    k = np.searchsorted(offsets, flat, side="right") - 1
    local = flat - offsets[k]
    nx = nxs[k]
    t, i = local // (h * w), (local // w) % h
    return offsets[k] + ((t // nx * h + i) * nx + t % nx) * w + local % w


def _exclude_zero_tiles(
    bound: torch.Tensor, xs: Sequence[torch.Tensor], tiles: np.ndarray, candidates: torch.Tensor
) -> None:
    """`exclude_zero_tiles` for the tensors' tiles numbered together (tensor `k`'s from
    `tiles[k]`), before any output overwrites its tensor."""
    cut = np.searchsorted(candidates.numpy(), tiles)
    for k, x in enumerate(xs):
        if cut[k] < cut[k + 1]:
            local = candidates[cut[k] : cut[k + 1]] - int(tiles[k])
            part = bound[int(tiles[k]) : int(tiles[k + 1])]
            exclude_zero_tiles(part, x.reshape(-1, *x.shape[-2:]), local)


def _place(
    flat: np.ndarray, offsets: np.ndarray, nxs: np.ndarray, h: int, w: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Output-layout positions in the tensors concatenated → (tensor, position in it, tile row
    `r`·nx + tile column: the tile's number within its tensor)."""
    k = np.searchsorted(offsets, flat, side="right") - 1
    local = flat - offsets[k]
    nx = nxs[k]
    return k, local, local // (h * nx * w) * nx + (local // w) % nx


def _pending(
    outs: list[torch.Tensor],
    flat: np.ndarray,
    nz: np.ndarray,
    values: torch.Tensor,
    offsets: np.ndarray,
    nxs: np.ndarray,
    shape: tuple[int, int],
) -> Pending:
    """The undecided elements at `flat` (ascending output-layout positions in the tensors
    concatenated), with each distinct tile's non-zeros gathered once from `nz` and `values`."""
    h, w = shape
    k, local, number = _place(flat, offsets, nxs, h, w)
    nx = nxs[k]
    j, i = local % w, (local // (nx * w)) % h
    uniq, inverse = np.unique(offsets[k] // (h * w) + number, return_inverse=True)
    picked, where = tile_nonzeros(nz, values, uniq, h * w)
    cut = np.searchsorted(flat, offsets)
    targets = [
        (out, torch.from_numpy(local[cut[n] : cut[n + 1]]))
        for n, out in enumerate(outs)
        if cut[n] < cut[n + 1]
    ]
    tile, row, col = (torch.from_numpy(v) for v in (inverse.reshape(-1), i, j))
    return Pending(picked, where, len(uniq), tile, row, col, targets)
