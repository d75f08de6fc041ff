"""Per-sample commitments on a tensor-parallel rank: the probe's coordinates read from slices.

A fingerprint (``psyche.distro.sample_commit``) is made of a micro-batch's gradient at
``COORDS`` coordinates of the *full* tensors. A TP rank holds a slice of each sharded gradient
(``Shard(0)`` for the column-wise layers, ``Shard(1)`` for the row-wise ones) and the whole of
each replicated one (embeddings, norms, row-wise biases), identical on every rank of its group.
So each rank writes the probed coordinates that fall in its own slices — replicated tensors only
on the group's first rank — into a vector of zeros, and one sum over the TP group per micro-batch
gives every rank the full probed vector. The sum is exact: every coordinate has one writer and
``x + 0 = x``. Gathering the full gradients instead (``full_tensor``) would move the whole model
per micro-batch; this moves ``COORDS`` floats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from psyche.distro.sample_commit import Probe

__all__ = ["ShardedProbe"]


@dataclass(frozen=True, slots=True)
class _Reads:
    """One tensor's share: which of the probe's outputs this rank writes, from which of its
    local (flat) values."""

    outputs: torch.Tensor
    local: torch.Tensor


def _reads(param: torch.Tensor, indices: torch.Tensor, first: int, tp_index: int) -> _Reads:
    outputs = torch.arange(first, first + indices.numel())
    if not isinstance(param, DTensor) or param.placements[0].is_replicate():
        if tp_index == 0:
            return _Reads(outputs, indices)
        return _Reads(outputs[:0], indices[:0])
    placement = param.placements[0]
    if not placement.is_shard():
        raise ValueError(f"cannot probe a gradient placed as {placement}")
    dim = placement.dim  # type: ignore[attr-defined]
    full = tuple(param.shape)
    local = tuple(param.to_local().shape)
    if full[dim] != local[dim] * param.device_mesh.size():
        # Even shards are what the TP plan makes (it checks heads, widths and vocabulary).
        raise ValueError(f"uneven shards of a {full} tensor: {local} on each rank")
    coords = list(torch.unravel_index(indices, full))
    start = tp_index * local[dim]
    mine = (coords[dim] >= start) & (coords[dim] < start + local[dim])
    coords[dim] = coords[dim] - start
    flat = torch.zeros_like(indices)
    stride = 1
    for d in reversed(range(len(local))):
        flat += coords[d] * stride
        stride *= local[d]
    return _Reads(outputs[mine], flat[mine])


class ShardedProbe:
    """``probe.gather`` for one TP rank of ``group`` (its index ``tp_index``), for ``params``
    (this rank's compute model's parameters, in the probe's ascending-name order)."""

    def __init__(
        self,
        probe: Probe,
        params: Sequence[torch.Tensor],
        tp_index: int,
        group: dist.ProcessGroup,
        device: torch.device,
    ) -> None:
        if len(params) != len(probe.indices):
            raise ValueError(f"{len(params)} parameters for a probe of {len(probe.indices)}")
        self.width = int(probe.signs.shape[1])
        self.group = group
        self.device = device
        self.reads: list[_Reads] = []
        first = 0
        for p, idx in zip(params, probe.indices, strict=True):
            reads = _reads(p, idx, first, tp_index)
            # On the device once, not per micro-batch (a GPU rank would copy them every time).
            self.reads.append(_Reads(reads.outputs.to(device), reads.local.to(device)))
            first += idx.numel()

    def gather(self, grads: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """The full tensors' probed coordinates, float32 on the CPU (a collective: every rank
        of the group calls it for the same micro-batch)."""
        out = torch.zeros(self.width, dtype=torch.float32, device=self.device)
        for reads, g in zip(self.reads, grads, strict=True):
            if g is None or reads.local.numel() == 0:
                continue  # a missing gradient reads as zeros, as in Probe.gather
            values = g.to_local() if isinstance(g, DTensor) else g
            out[reads.outputs] = values.detach().reshape(-1)[reads.local].float()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=self.group)
        return out.cpu()
