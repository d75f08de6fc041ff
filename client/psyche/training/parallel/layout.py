"""Which worker process does what: the (data, tensor) grid of one client's devices.

A client with `--data-parallelism N --tensor-parallelism M` runs N·M ranks. Ranks are laid out
row-major over a `(dp, tp)` grid, the order `torch.distributed.device_mesh.init_device_mesh`
uses for a mesh of shape `(N, M)`:

    rank = dp_index · M + tp_index

so the M ranks of one data-parallel replica are consecutive and rank 0 (the client's own process,
which owns the canonical weights and DisTrO) is replica 0's first tensor-parallel shard.

Micro-batches are those of a DP=1 client (`batch.split(micro_batch_size)`), handed out to the
replicas in contiguous runs, the first `n mod N` replicas taking one more; a replica may get none
(it then contributes a zero gradient). Keeping DP=1's micro-batches is what makes the summed
gradient equal DP=1's up to float summation order.

This module is pure arithmetic (no torch.distributed), so it is cheap to test exhaustively.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ParallelLayout", "device_for_rank"]


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """`dp` data-parallel replicas of `tp` tensor-parallel shards each."""

    dp: int = 1
    tp: int = 1

    def __post_init__(self) -> None:
        for name, value in (("data parallelism", self.dp), ("tensor parallelism", self.tp)):
            # bool is an int subclass; `True` as a degree is a caller bug, not 1.
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer ≥ 1, got {value!r}")

    @property
    def world_size(self) -> int:
        """Processes (and devices) this client uses, rank 0 included."""
        return self.dp * self.tp

    @property
    def is_parallel(self) -> bool:
        """False for DP=TP=1: a plain single-process trainer does the work."""
        return self.world_size > 1

    @property
    def mesh_shape(self) -> tuple[int, int]:
        """The `(dp, tp)` shape for `init_device_mesh(..., mesh_dim_names=("dp", "tp"))`."""
        return (self.dp, self.tp)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside 0..{self.world_size - 1}")

    def coords(self, rank: int) -> tuple[int, int]:
        """`(dp_index, tp_index)` of `rank`."""
        self._check_rank(rank)
        return divmod(rank, self.tp)

    def rank_of(self, dp_index: int, tp_index: int) -> int:
        """The rank at grid position `(dp_index, tp_index)`."""
        if not (0 <= dp_index < self.dp and 0 <= tp_index < self.tp):
            raise ValueError(f"({dp_index}, {tp_index}) is outside the {self.dp}×{self.tp} grid")
        return dp_index * self.tp + tp_index

    def dp_group(self, tp_index: int) -> list[int]:
        """The ranks holding shard `tp_index` in every replica (gradients are summed over it)."""
        return [self.rank_of(d, tp_index) for d in range(self.dp)]

    def tp_group(self, dp_index: int) -> list[int]:
        """The ranks of replica `dp_index` (they run one forward/backward together)."""
        return [self.rank_of(dp_index, t) for t in range(self.tp)]

    def micro_batch_range(self, n_micro_batches: int, dp_index: int) -> range:
        """Indices of the micro-batches replica `dp_index` trains, out of `n_micro_batches`."""
        if n_micro_batches < 0:
            raise ValueError(f"n_micro_batches must be ≥ 0, got {n_micro_batches}")
        if not 0 <= dp_index < self.dp:
            raise ValueError(f"dp_index {dp_index} is outside 0..{self.dp - 1}")
        base, extra = divmod(n_micro_batches, self.dp)
        start = dp_index * base + min(dp_index, extra)
        return range(start, start + base + (1 if dp_index < extra else 0))


def device_for_rank(base: torch.device, rank: int, layout: ParallelLayout) -> torch.device:
    """The device `rank` computes on when rank 0 uses `base`.

    CPU: every rank on the CPU. CUDA: consecutive devices from `base`'s index (`cuda` is
    `cuda:0`), so a client given `cuda:2` with 4 ranks uses cuda:2..cuda:5. MPS has one device
    and no collective backend, so only a single rank can use it.
    """
    layout._check_rank(rank)
    if base.type == "cpu":
        return torch.device("cpu")
    if base.type == "cuda":
        first = base.index or 0
        available = torch.cuda.device_count()
        if first + layout.world_size > available:
            raise ValueError(
                f"data parallelism {layout.dp} × tensor parallelism {layout.tp} needs "
                f"{layout.world_size} CUDA devices from cuda:{first}, but only {available} exist"
            )
        return torch.device("cuda", first + rank)
    if base.type == "mps":
        if layout.is_parallel:
            raise ValueError(
                "data/tensor parallelism > 1 is not supported on mps (one device, no "
                "torch.distributed backend); use --data-parallelism 1 --tensor-parallelism 1"
            )
        return base
    raise ValueError(f"device type {base.type!r} is not supported for parallel training")
