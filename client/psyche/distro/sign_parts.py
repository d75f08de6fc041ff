"""What both evaluations of `decode_sign`'s fast path share (`psyche.distro.sign_bound`, tensor by
tensor, and `psyche.distro.sign_group`, a tile shape's sparse tensors together): the grid basis,
the reusable buffers, the parts' clock, and the exact recomputation of the undecided elements.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time

import numpy as np
import torch

from psyche.distro.dct_exact import (
    basis_scale,
    coefficient_bits,
    exact_rows_times_basis,
    int_basis,
    normalise_device,
    pow2,
)

__all__ = [
    "Clock",
    "Pending",
    "Scratch",
    "exclude_zero_tiles",
    "fill_exact",
    "grid_basis",
    "grid_columns",
    "release_scratch",
    "rows_sign_cpu",
    "thread_scratch",
    "tile_nonzeros",
]


@dataclasses.dataclass
class Pending:
    """Undecided elements: the non-zero coefficients of the `count` distinct tiles holding them
    (float32, as the exact path reads them, and their flat positions in those tiles stacked,
    ascending), each element's tile among those, its row and column in the tile, and where its
    sign goes: `targets`, (output, flat positions in it) per tensor, in the elements' order."""

    values: torch.Tensor
    flat: torch.Tensor
    count: int
    tile: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    targets: list[tuple[torch.Tensor, torch.Tensor]]


def tile_nonzeros(
    nz: np.ndarray, values: torch.Tensor, uniq: np.ndarray, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The non-zeros of tiles `uniq` (ascending) of `size` elements, from all tiles' non-zeros
    (`nz` ascending flat indices, `values`): their values, and their positions in the tiles
    stacked. Tile `t`'s are `nz[start[t]:end[t]]`; the arithmetic runs in NumPy (a few µs per
    op instead of torch's ~15)."""
    start, end = np.searchsorted(nz, uniq * size), np.searchsorted(nz, (uniq + 1) * size)
    count = end - start
    owner = np.repeat(np.arange(len(uniq)), count)
    pick = np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count) + start[owner]
    return values[torch.from_numpy(pick)], torch.from_numpy(owner * size + nz[pick] % size)


def exclude_zero_tiles(bound: torch.Tensor, tiles: torch.Tensor, candidates: torch.Tensor) -> None:
    """Set the bound of all-zero tiles to −1: their float value is ±0 and their exact value 0, so
    `sign` (+0 for ±0) is already right. `candidates` (float `‖X‖₁ = 0`) are checked on their
    bits, as flush-to-zero may read a subnormal as 0."""
    bits = tiles.index_select(0, candidates).view(torch.int32) & 0x7FFFFFFF
    zero = candidates[(bits == 0).flatten(1).all(dim=1)]
    bound.view(-1)[zero] = -1.0


@functools.lru_cache(maxsize=128)
def grid_basis(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`Q̂ = Q·2^−e`, the grid basis, in `dtype` (exact: integers below 2^22 times a power of 2)."""
    return int_basis(size, device).to(dtype) * 2.0 ** -basis_scale(size)


@functools.lru_cache(maxsize=128)
def grid_columns(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`Q̂ᵀ`, contiguous: gathering its rows with `index_select` costs a seventh of indexing the
    transposed view."""
    return grid_basis(size, dtype, device).T.contiguous()


class Scratch:
    """Buffers reused by the tensors of one call: fresh memory costs page faults on every use."""

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}

    def trim(self, limit: int) -> None:
        """Drop the buffers over `limit` bytes (a large tensor's, not worth holding)."""
        for name, buf in list(self.buffers.items()):
            if buf.numel() * buf.element_size() > limit:
                del self.buffers[name]

    def get(self, name: str, size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A flat tensor of `size` elements (contents undefined), `dtype`, on `device`."""
        buf = self.buffers.get(name)
        if buf is None or buf.dtype != dtype or buf.device != device or buf.numel() < size:
            buf = torch.empty(size, dtype=dtype, device=device)
            self.buffers[name] = buf
        return buf[:size]


_KEPT_BYTES = 1 << 22
"""Scratch buffers up to this size stay with the thread between calls: an apply's batches
(2^18 elements) fit, and their pages are then not faulted in again on every call (about 6 % of
a tiny model's apply)."""

_local = threading.local()


def thread_scratch() -> Scratch:
    """This thread's `Scratch`, kept between calls (trimmed to `_KEPT_BYTES` per buffer by
    `release_scratch`); one per thread, so concurrent applies never share a buffer."""
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = Scratch()
    assert isinstance(scratch, Scratch)
    return scratch


def release_scratch(scratch: Scratch) -> None:
    """End of a call: keep only the buffers small enough to hold on to."""
    scratch.trim(_KEPT_BYTES)


class Clock:
    """Per-part seconds for benches; does nothing without a `parts` dict."""

    def __init__(self, parts: dict[str, float] | None) -> None:
        self.parts = parts
        self.last = time.process_time()

    def lap(self, name: str) -> None:
        if self.parts is not None:
            now = time.process_time()
            self.parts[name] = self.parts.get(name, 0.0) + now - self.last
            self.last = now

    def count(self, undecided: torch.Tensor) -> None:
        if self.parts is not None:
            self.add(int(undecided.sum()), undecided.numel())

    def add(self, undecided: int, elements: int) -> None:
        if self.parts is not None:
            self.parts["undecided"] = self.parts.get("undecided", 0) + undecided
            self.parts["elements"] = self.parts.get("elements", 0) + elements


def fill_exact(todos: list[Pending], shape: tuple[int, int]) -> None:
    """Write the exact grid sign of every pending element of tensors sharing one tile shape.

    Element `(i, j)` of a tile's exact sum needs column `j` of the tile after the first axis:
    `h` exact dot products over the tile's rows (the same grids as `decode_sign_exact`: each row
    scaled by the power of two of its peak and rounded), then that column's grid and its sum
    along the first axis. The apply's tiles are sparse, so the rows are gridded from their
    non-zero coefficients only, once per distinct tile, and each element sums its tile's
    non-zeros; zeros contribute exact zeros to the exact path's sums. On the CPU the same
    arithmetic runs in NumPy: on the few elements of an apply, torch's ~15 µs per call were
    most of the cost.
    """
    if todos[0].values.device.type == "cpu":
        _fill_exact_cpu(todos, shape)
        return
    h, w = shape
    base = [0]
    for todo in todos:
        base.append(base[-1] + todo.count)
    count = base[-1]
    values = torch.cat([todo.values for todo in todos])
    flat = torch.cat([todo.flat + b * h * w for todo, b in zip(todos, base, strict=False)])
    tile = torch.cat([todo.tile + b for todo, b in zip(todos, base, strict=False)])
    row = torch.cat([todo.row for todo in todos])
    col = torch.cat([todo.col for todo in todos])
    n = tile.numel()
    device = values.device
    dev = normalise_device(device)
    line = flat // w  # tile · h + row: the exact path's first-axis rows (grouped by tile)
    peak = values.new_zeros(count * h).scatter_reduce_(0, line, values.abs(), "amax")
    _, peak_exp = torch.frexp(peak)  # as the exact path's grids: 0 for an all-zero row
    shift = coefficient_bits(w) - peak_exp.to(torch.int64)
    ints = (values * pow2(shift[line])).round_()
    # Each element against every non-zero of its tile: `start`, `size` index the non-zeros.
    size = torch.bincount(line // h, minlength=count)
    start = size.cumsum(0) - size
    per = size[tile]
    elem = torch.repeat_interleave(torch.arange(n, device=device), per)
    k = torch.arange(elem.numel(), device=device) - (per.cumsum(0) - per)[elem]
    k += start[tile[elem]]
    # Integer products ≤ 2^52 and integer partial sums ≤ 2^52: exact in any order.
    products = ints[k] * int_basis(w, dev)[col[elem], flat[k] % w]
    first = torch.zeros(n * h, dtype=torch.float64, device=device)
    first.index_add_(0, elem * h + line[k] % h, products)
    lines = (tile * h).unsqueeze(1) + torch.arange(h, device=device)
    first.mul_(pow2(-shift[lines.view(-1)] - basis_scale(w)))
    second, _ = exact_rows_times_basis(first.view(n, h), h)
    exact = torch.sign(second.gather(1, row.unsqueeze(1)).squeeze(1)) + 0.0  # −0 → +0
    begin = 0
    for todo in todos:
        for out, where in todo.targets:
            m = where.numel()
            out.view(-1)[where] = exact[begin : begin + m].to(out.dtype)
            begin += m


def _pow2(exponent: np.ndarray) -> np.ndarray:
    """`dct_exact.pow2` in NumPy: `2^exponent` as float64 from its bit pattern (clamped alike)."""
    clamped = np.minimum(np.maximum(exponent.astype(np.int64), -1022), 1023)  # `clip` costs more
    return ((clamped + 1023) << 52).view(np.float64)


def _fill_exact_cpu(todos: list[Pending], shape: tuple[int, int]) -> None:
    """`fill_exact` on the CPU: the same exact steps (a max, `frexp`, power-of-two scalings,
    rounding half to even, integer products and sums below 2^52), so the same integers; only
    the element's own row of the second axis is summed."""
    h, w = shape
    base = np.cumsum([0] + [todo.count for todo in todos])
    count = int(base[-1])
    flat = np.concatenate([t.flat.numpy() + b * h * w for t, b in zip(todos, base, strict=False)])
    tile = np.concatenate([t.tile.numpy() + b for t, b in zip(todos, base, strict=False)])
    row = np.concatenate([todo.row.numpy() for todo in todos])
    col = np.concatenate([todo.col.numpy() for todo in todos])
    values = np.concatenate([todo.values.numpy() for todo in todos])  # float32, as read
    n = len(tile)
    line = flat // w  # tile · h + row: the exact path's first-axis rows (grouped by tile)
    peak = np.zeros(count * h, dtype=values.dtype)
    np.maximum.at(peak, line, np.abs(values))
    _, peak_exp = np.frexp(peak)  # as the exact path's grids: 0 for an all-zero row
    shift = coefficient_bits(w) - peak_exp.astype(np.int64)
    ints = np.rint(values * _pow2(shift[line]))  # float32 · float64: exact, in float64
    # Each element against every non-zero of its tile: `start`, `size` index the non-zeros.
    size = np.bincount(line // h, minlength=count)
    start = size.cumsum() - size
    per = size[tile]
    elem = np.repeat(np.arange(n), per)
    k = np.arange(len(elem)) - (per.cumsum() - per)[elem] + start[tile[elem]]
    # Integer products ≤ 2^52 and integer partial sums ≤ 2^52: exact in any order.
    products = ints[k] * int_basis(w, torch.device("cpu")).numpy()[col[elem], flat[k] % w]
    first = np.bincount(elem * h + line[k] % h, weights=products, minlength=n * h)
    first = first.astype(np.float64, copy=False)  # an empty `products` gives int64 zeros
    lines = ((tile * h)[:, None] + np.arange(h)).reshape(-1)
    first *= _pow2(-shift[lines] - basis_scale(w))
    # `exact_rows_times_basis` of each element's column, at its row only: the column's grid
    # (scaled by the power of two of its peak, rounded), dotted with that basis row.
    first = first.reshape(n, h)
    _, peak_exp = np.frexp(np.abs(first).max(axis=1, initial=0.0))  # 0 for an all-zero column
    ints = np.rint(first * _pow2(coefficient_bits(h) - peak_exp.astype(np.int64))[:, None])
    second = np.einsum("ij,ij->i", ints, int_basis(h, torch.device("cpu")).numpy()[row])
    exact = np.sign(second) + 0.0  # −0 → +0
    begin = 0
    for todo in todos:
        for out, where in todo.targets:
            m = where.numel()
            out.view(-1).numpy()[where.numpy()] = exact[begin : begin + m]  # ±1, 0: exact
            begin += m


def rows_sign_cpu(x: torch.Tensor) -> torch.Tensor | None:
    """`decode_sign_exact` of 1-D chunks (the rows of `x`, float32 on the CPU), gridded in NumPy, as
    flat float64 {−1, 0, 1}; None where a value is not finite (the exact path itself decides those).
    The same exact steps as `exact_rows_times_basis` (a row's peak, `frexp`, a power-of-two
    scaling, rounding half to even, an integer matmul below 2^53), so the same signs; a model's
    few short 1-D tensors cost about ten torch calls of ~15 µs each there."""
    a = x.numpy()
    peak = np.abs(a).max(axis=1, initial=0.0)
    if not np.isfinite(peak).all():
        return None
    _, peak_exp = np.frexp(peak)  # 0 for an all-zero row
    c = a.shape[1]
    ints = np.rint(a * _pow2(coefficient_bits(c) - peak_exp.astype(np.int64))[:, None])
    # The integer matmul in torch (MKL), not NumPy: NumPy's own BLAS starts a thread pool that
    # a client process did not have before (it hung the two-client determinism run).
    sums = torch.from_numpy(ints) @ int_basis(c, torch.device("cpu")).T
    return (torch.sign(sums) + 0.0).reshape(-1)  # −0 → +0
