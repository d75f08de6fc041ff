"""Top-k sparsification of DCT tiles, its inverse, aggregation and 1-bit sign packing.

See docs/distro.md, "Top-k compression".

Each tile (a 1-D chunk, or an h×w 2-D tile flattened) keeps its `k` largest-magnitude coefficients
as (index, value) pairs. Indices are local to the tile, so they fit in u8/u16/u32 depending on the
tile size (`totalk`) and cost 1–4 bytes each on the wire.

Aggregation (`aggregate`) is the mean over peers of each coefficient that at least one peer chose
(`scatter_reduce(mean, include_self=False)` on zeros; docs/distro.md, "Apply"). It is computed by
accumulating the peers one at a time in a fixed order rather than by one `scatter_reduce` call: on
accelerators `scatter_reduce` sums with atomics in an unspecified order, which would let honest
clients end a round with different weights. Because every peer's indices are distinct within a tile
(checked by the payload decoder, guaranteed by `topk`), the per-peer scatter has no collisions and
the sum order is exactly the payload order — bit-identical to the CPU `scatter_reduce` result, on
any device.

1-bit mode sends `signbit(value)` packed 8 per byte, least significant bit first; bit `b` decodes
to `1 − 2b`. A zero coefficient (only chosen when a tile has fewer than `k` non-zeros) reads as +1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "DistroResult",
    "aggregate",
    "chunk_shape",
    "compress",
    "decompress",
    "index_width",
    "pack_signs",
    "sign_values",
    "unpack_signs",
]


@dataclass(frozen=True, slots=True)
class DistroResult:
    """The compressed form of one parameter's encoded residual.

    `idx` (int64) and `val` have shape `chunk_shape(xshape) + (k,)`; `xshape` is the encoded shape
    (before merging tile axes) and `totalk` the number of coefficients per tile.
    """

    idx: torch.Tensor
    val: torch.Tensor
    xshape: tuple[int, ...]
    totalk: int

    @property
    def k(self) -> int:
        """Coefficients kept per tile."""
        return int(self.idx.shape[-1])


def chunk_shape(xshape: Sequence[int]) -> tuple[int, ...]:
    """Shape of the tile grid: `xshape` without its tile axes (one axis for 1-D, two otherwise)."""
    xshape = tuple(xshape)
    return xshape[:-2] if len(xshape) > 2 else xshape[:-1]


def totalk_of(xshape: Sequence[int]) -> int:
    """Coefficients per tile for an encoded shape."""
    xshape = tuple(xshape)
    return xshape[-2] * xshape[-1] if len(xshape) > 2 else xshape[-1]


def index_width(totalk: int) -> int:
    """Bytes per index on the wire: 1 (u8) up to 256, 2 (u16) up to 65,536, else 4 (u32)."""
    if totalk < 1:
        raise ValueError(f"totalk must be ≥ 1, got {totalk}")
    if totalk <= 256:
        return 1
    if totalk <= 65_536:
        return 2
    if totalk <= 2**32:
        return 4
    raise ValueError(f"totalk {totalk} does not fit a u32 index")


def compress(encoded: torch.Tensor, topk: int) -> DistroResult:
    """Keep the `clamp(topk, 1, totalk)` largest-magnitude coefficients of every tile.

    Indices come from `torch.topk(|x|, sorted=True)`, so each tile's entries are ordered by
    decreasing magnitude; values keep `encoded`'s dtype.
    """
    if encoded.ndim < 2:
        raise ValueError(f"expected an encoded tensor (≥2-D), got shape {tuple(encoded.shape)}")
    xshape = tuple(int(d) for d in encoded.shape)
    flat = encoded.reshape(*xshape[:-2], -1) if encoded.ndim > 2 else encoded
    totalk = int(flat.shape[-1])
    k = min(max(topk, 1), totalk)
    idx = torch.topk(flat.abs(), k, dim=-1, largest=True, sorted=True).indices
    return DistroResult(idx=idx, val=flat.gather(-1, idx), xshape=xshape, totalk=totalk)


def decompress(
    idx: torch.Tensor,
    val: torch.Tensor,
    xshape: Sequence[int],
    totalk: int,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Dense encoded tensor of shape `xshape` with `val` scattered at `idx` (zeros elsewhere).

    Computed in `dtype` (default: `val`'s dtype) on `device` (default: `idx`'s). Repeated indices
    within a tile are averaged.
    """
    result = DistroResult(idx, val, tuple(xshape), totalk)
    return aggregate([result], dtype or val.dtype, device)


def aggregate(
    results: Sequence[DistroResult],
    dtype: torch.dtype = torch.float32,
    device: torch.device | None = None,
    *,
    distinct: bool = False,
) -> torch.Tensor:
    """Per-coefficient mean over `results` (coefficients nobody chose stay 0), shape `xshape`.

    `distinct=True` vouches that no result repeats an index within a tile (true of `compress`
    output and decoded payloads) and skips that check, which costs a sort and a device sync.

    Equal to `zeros.scatter_reduce(-1, cat(idx), cat(val), "mean", include_self=False)`; see the
    module docstring for why it is computed peer by peer. A peer that repeats an index within a
    tile (never an honest one) has its repeats averaged first, so it still counts once.
    """
    if not results:
        raise ValueError("aggregate needs at least one result")
    first = results[0]
    xshape, totalk = first.xshape, first.totalk
    grid = chunk_shape(xshape)
    if totalk_of(xshape) != totalk:
        raise ValueError(f"totalk {totalk} does not match xshape {xshape}")
    device = first.idx.device if device is None else device
    acc = _PeerSum(torch.zeros((*grid, totalk), dtype=dtype, device=device))
    for n, result in enumerate(results):
        _check_fits(n, result, xshape, totalk, grid)
        idx = result.idx.to(device=device, dtype=torch.int64)
        val = result.val.to(device=device, dtype=dtype)
        if not distinct and _has_duplicates(idx):
            # Only hand-built inputs get here (decoded payloads are checked): one peer, one vote.
            acc.add_repeating(idx, val)
        elif len(results) == 1:
            # One peer: its mean is its own values (count 1 where chosen, 0 elsewhere).
            return acc.total.scatter_add_(-1, idx, val).reshape(xshape)
        else:
            acc.add_distinct(idx, val)
    return acc.mean().reshape(xshape)


def _check_fits(
    n: int, result: DistroResult, xshape: tuple[int, ...], totalk: int, grid: tuple[int, ...]
) -> None:
    """Raise unless result ``n`` has the first result's shapes."""
    if result.xshape != xshape or result.totalk != totalk:
        raise ValueError(
            f"result {n} has xshape {result.xshape}/totalk {result.totalk}, "
            f"expected {xshape}/{totalk}"
        )
    if tuple(result.idx.shape[:-1]) != grid or result.idx.shape != result.val.shape:
        raise ValueError(
            f"result {n}: idx {tuple(result.idx.shape)} / val {tuple(result.val.shape)} "
            f"do not fit the tile grid {grid}"
        )


class _PeerSum:
    """The peers' values summed per coefficient, and how many peers chose each, added one peer
    at a time in the caller's order (the module docstring says why)."""

    def __init__(self, total: torch.Tensor) -> None:
        self.total = total
        self._count: torch.Tensor | None = None
        self._scratch: torch.Tensor | None = None

    def add_distinct(self, idx: torch.Tensor, val: torch.Tensor) -> None:
        """A peer whose indices are distinct within each tile: each chosen coefficient gets
        exactly one addition from it (no collisions, so no atomics order on accelerators) and the
        others none, which is bit-identical to adding the dense scatter: ``total`` is never −0.0,
        so ``x + 0.0`` would have left it unchanged."""
        self.total.scatter_add_(-1, idx, val)
        self._counts().scatter_add_(-1, idx, torch.ones_like(val))

    def add_repeating(self, idx: torch.Tensor, val: torch.Tensor) -> None:
        """A peer that repeats an index within a tile: its repeats are averaged first, so it
        still counts once."""
        if self._scratch is None:
            self._scratch = torch.empty_like(self.total)
        part = self._scratch.zero_().scatter_reduce(-1, idx, val, "mean", include_self=False)
        chosen = torch.zeros_like(self.total).scatter_(-1, idx, 1.0)
        self.total += part
        self._counts().add_(chosen)

    def mean(self) -> torch.Tensor:
        """Per coefficient, the sum over the peers that chose it divided by their number (0
        where none did)."""
        assert self._count is not None
        return self.total / self._count.clamp_min(1.0)

    def _counts(self) -> torch.Tensor:
        if self._count is None:
            self._count = torch.zeros_like(self.total)
        return self._count


def _has_duplicates(idx: torch.Tensor) -> bool:
    if idx.shape[-1] < 2:
        return False
    ordered = idx.sort(dim=-1).values
    return bool((ordered[..., 1:] == ordered[..., :-1]).any())


def sign_values(val: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """What a 1-bit payload carries for `val`: `1 − 2·signbit(val)` (so −0.0 → −1, +0.0 → +1)."""
    signs = 1.0 - 2.0 * torch.signbit(val).to(torch.float32)
    return signs.to(dtype or val.dtype)


def pack_signs(val: torch.Tensor) -> torch.Tensor:
    """`signbit(val)` flattened and packed 8 per byte, LSB first (1 = negative); uint8, CPU."""
    bits = torch.signbit(val.detach().reshape(-1)).to(device="cpu", dtype=torch.uint8)
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    weights = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8)
    # Each bit contributes a distinct power of two, so the sum never exceeds 255.
    return (bits.reshape(-1, 8) * weights).sum(dim=-1, dtype=torch.int32).to(torch.uint8)


def unpack_signs(
    packed: torch.Tensor, count: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Inverse of `pack_signs`: the first `count` bits as `1 − 2b` (±1) in `dtype`, flat."""
    if packed.dtype != torch.uint8 or packed.ndim != 1:
        raise ValueError(
            f"packed signs must be a 1-D uint8 tensor, got {packed.dtype} {packed.ndim}-D"
        )
    if packed.numel() != (count + 7) // 8:
        raise ValueError(f"{count} signs need {(count + 7) // 8} bytes, got {packed.numel()}")
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    return (1.0 - 2.0 * bits.reshape(-1)[:count].to(torch.float32)).to(dtype)
