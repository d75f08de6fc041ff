"""The collective protocol of one parallel train step, run alike by every rank.

After rank 0 has broadcast a `Command` on the control group, every rank calls `run_step`, which
issues the same collectives in the same order on every rank:

1. `sync_weights`: rank 0 broadcasts each parameter and buffer of the canonical model (already
   moved by the lookahead); a DP replica copies it whole, a TP shard keeps its slice
   (`distribute_tensor(..., src_data_rank=None)` slices locally, no further traffic).
2. `compute_share`: forward/backward over this replica's run of DP=1's micro-batches, each loss
   scaled by 1/(total micro-batches), optionally summed in fp32 buffers. Before every micro-batch
   the ranks of one TP group agree on cancellation (one scalar all-reduce), since they must run
   the same forwards; DP replicas stop independently.
3. one all-reduce of `[loss, cancelled, failed]`: every rank learns whether to go on;
4. `reduce_grads` (only if nothing was cancelled or failed): per parameter, a sum-reduce over the
   DP group onto replica 0, then on replica 0 the TP shards are gathered with DTensor's
   `full_tensor()`; rank 0 stores the FULL logical gradient in the canonical `.grad`;
5. with a probe (per-sample commitments), one sum-reduce over DP brings every replica's
   micro-batch fingerprints to rank 0 in batch order (with TP > 1 the ranks of a TP group have
   already summed each micro-batch's probed coordinates over their slices:
   `sharded_probe`).

An exception inside a rank's compute is caught and reported through the `failed` flag, so the
collectives still match and the next step works; an error inside a TP forward's own collective
cannot be recovered that way and ends in the process group's timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, distribute_tensor

from psyche.distro.sample_commit import MicroBatchFingerprints, Probe
from psyche.training.micro_batch import chunk_share
from psyche.training.parallel.layout import ParallelLayout
from psyche.training.parallel.sharded_probe import ShardedProbe

__all__ = ["Command", "RankContext", "StepResult", "run_step"]


@dataclass(frozen=True, slots=True)
class Command:
    """What rank 0 tells the workers to do next (pickled over the gloo control group)."""

    kind: Literal["train", "stop"]
    batch: torch.Tensor | None = None
    """The whole batch ([samples, seq] int64, CPU); every rank splits it the same way."""
    micro_batch_size: int = 1
    grad_accum_fp32: bool = False
    probe: Probe | None = None
    """With a probe, each micro-batch's own gradient is fingerprinted (per-sample commitments,
    ``psyche.distro.sample_commit``) and rank 0 gets them in batch order."""


@dataclass(slots=True)
class RankContext:
    """One rank's view of the client's process group."""

    rank: int
    layout: ParallelLayout
    device: torch.device
    model: torch.nn.Module
    """This rank's compute model (rank 0 with TP=1: the canonical model itself)."""
    tp_mesh: DeviceMesh
    dp_group: dist.ProcessGroup
    control_group: dist.ProcessGroup
    trainable: tuple[str, ...]
    synced: tuple[str, ...]
    owns_canonical: bool = False

    @property
    def coords(self) -> tuple[int, int]:
        return self.layout.coords(self.rank)


@dataclass(frozen=True, slots=True)
class StepResult:
    loss: float
    """The batch's mean loss (the sum of every replica's scaled losses); valid on rank 0."""
    cancelled: bool
    failures: int
    """Ranks whose compute raised (each worker sends its traceback to rank 0)."""
    error: BaseException | None = None
    """This rank's own exception, if its compute failed."""
    fingerprints: torch.Tensor | None = None
    """On rank 0, with a probe and a completed step: ``[micro-batches, PROJECTIONS]`` float32,
    every replica's rows in the batch's micro-batch order."""

    @property
    def failed(self) -> bool:
        return self.failures > 0


def _named(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters()) | dict(model.named_buffers())


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


@torch.no_grad()
def sync_weights(ctx: RankContext, canonical: torch.nn.Module | None) -> None:
    """Give every rank's compute model rank 0's current canonical values (see module doc)."""
    mine = _named(ctx.model)
    source = _named(canonical) if canonical is not None else {}
    for name in ctx.synced:
        target = mine[name]
        if ctx.owns_canonical:
            dist.broadcast(target.detach(), group_src=0)
            continue
        src = source.get(name)
        if src is not None:
            full = src.detach()  # rank 0 with a separate (sharded) compute model: send canonical
        elif isinstance(target, DTensor):
            full = torch.empty(target.shape, dtype=target.dtype, device=ctx.device)
        else:
            dist.broadcast(target.detach(), group_src=0)  # a whole replica receives in place
            continue
        dist.broadcast(full, group_src=0)
        if isinstance(target, DTensor):
            shard = distribute_tensor(
                full, target.device_mesh, target.placements, src_data_rank=None
            )
            target.to_local().copy_(shard.to_local())
        else:
            target.detach().copy_(full)


def _agree(ctx: RankContext, flag: bool) -> bool:
    """True on every rank of this TP group if `flag` is true on any of them."""
    if ctx.layout.tp == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.tp_mesh.get_group())
    return bool(t.item() > 0)


def compute_share(
    ctx: RankContext,
    command: Command,
    cancelled: Callable[[], bool],
    fingerprints: MicroBatchFingerprints | None = None,
) -> tuple[float, bool, list[torch.Tensor | None]]:
    """Forward/backward this replica's micro-batches; `(loss sum, cancelled, local grads)`.
    `fingerprints` records each micro-batch's own gradient, as `Trainer` does."""
    assert command.batch is not None
    batch = command.batch.to(ctx.device, torch.int64)
    chunks = batch.split(command.micro_batch_size)
    mine = ctx.layout.micro_batch_range(len(chunks), ctx.coords[0])
    params = dict(ctx.model.named_parameters())
    trainable = [params[n] for n in ctx.trainable]
    use_buffers = command.grad_accum_fp32 and any(p.dtype != torch.float32 for p in trainable)
    buffers = (
        [torch.zeros_like(_local(p), dtype=torch.float32) for p in trainable] if use_buffers else []
    )
    ctx.model.train()
    total, stopped = 0.0, False
    for i in mine:
        if _agree(ctx, cancelled()):
            stopped = True
            break
        # As `Trainer._loss`: the model shifts labels and averages over predicted tokens.
        loss = ctx.model(input_ids=chunks[i], labels=chunks[i], use_cache=False).loss
        share = chunk_share(chunks[i].shape[0], batch.shape[0])
        loss = loss / share
        loss.backward()
        total += float(loss.detach())
        if fingerprints is not None:
            fingerprints.record(fresh=use_buffers, scale=share)
        if use_buffers:
            for p, buf in zip(trainable, buffers, strict=True):
                if p.grad is not None:
                    buf.add_(_local(p.grad).float())
                    p.grad = None
    if use_buffers:
        return total, stopped, list(buffers)
    return total, stopped, [None if p.grad is None else _local(p.grad) for p in trainable]


@torch.no_grad()
def reduce_grads(
    ctx: RankContext, grads: list[torch.Tensor | None], canonical: torch.nn.Module | None
) -> None:
    """Sum gradients over DP, gather TP shards, and store full gradients in `canonical`."""
    dp_index, _ = ctx.coords
    params = dict(ctx.model.named_parameters())
    target = dict(canonical.named_parameters()) if canonical is not None else {}
    for name, grad in zip(ctx.trainable, grads, strict=True):
        p = params[name]
        local = grad if grad is not None else torch.zeros_like(_local(p))
        if ctx.layout.dp > 1:
            dist.reduce(local, group_dst=0, op=dist.ReduceOp.SUM, group=ctx.dp_group)
        if dp_index != 0:
            continue
        full = local
        if isinstance(p, DTensor):
            # A collective over this replica's TP group: every rank of replica 0 takes part.
            full = DTensor.from_local(local, p.device_mesh, p.placements).full_tensor()
        if canonical is not None:
            dest = target[name]
            dest.grad = full.to(dest.dtype)


def run_step(
    ctx: RankContext,
    command: Command,
    canonical: torch.nn.Module | None,
    cancelled: Callable[[], bool],
) -> StepResult:
    """The whole step on this rank; `canonical` is given on rank 0 only."""
    sync_weights(ctx, canonical)
    error: BaseException | None = None
    total, stopped = 0.0, False
    grads: list[torch.Tensor | None] = []
    fingerprints = None
    try:
        if command.probe is not None:
            fingerprints = _fingerprints(ctx, command.probe)
        total, stopped, grads = compute_share(ctx, command, cancelled, fingerprints)
    except Exception as e:  # reported through the status flags so every rank stays in step
        error = e
    stopped = stopped or cancelled()
    tp_leader = ctx.coords[1] == 0
    status = torch.tensor(
        [total if tp_leader else 0.0, float(stopped), float(error is not None)],
        dtype=torch.float64,
        device=ctx.device,
    )
    dist.all_reduce(status, op=dist.ReduceOp.SUM)
    loss, any_cancelled, failures = float(status[0]), bool(status[1] > 0), round(float(status[2]))
    rows = None
    if not (any_cancelled or failures):
        reduce_grads(ctx, grads, canonical)
        if fingerprints is not None:
            rows = _gather_fingerprints(ctx, command, fingerprints)
    if not ctx.owns_canonical or any_cancelled or failures:
        ctx.model.zero_grad(set_to_none=True)
    return StepResult(loss, any_cancelled, failures, error, rows)


def _fingerprints(ctx: RankContext, probe: Probe) -> MicroBatchFingerprints:
    """This rank's fingerprints of its micro-batches; with TP > 1 the probed coordinates are
    read from its slices and summed over its TP group (``sharded_probe``)."""
    fingerprints = MicroBatchFingerprints(ctx.model, probe)
    if ctx.layout.tp > 1:
        group = ctx.tp_mesh.get_group()
        sharded = ShardedProbe(probe, fingerprints.params, ctx.coords[1], group, ctx.device)
        fingerprints.gather = sharded.gather
    return fingerprints


def _gather_fingerprints(
    ctx: RankContext, command: Command, fingerprints: MicroBatchFingerprints
) -> torch.Tensor | None:
    """Every replica's fingerprint rows in batch order, on rank 0 (None elsewhere): one sum of
    row blocks that are zero outside each replica's own micro-batches, so the sum is exact."""
    assert command.batch is not None
    n = len(command.batch.split(command.micro_batch_size))
    mine = ctx.layout.micro_batch_range(n, ctx.coords[0])
    full = torch.zeros(n, fingerprints.probe.signs.shape[0], dtype=torch.float64)
    full[mine.start : mine.stop] = fingerprints.values().double()
    full = full.to(ctx.device)
    dist.reduce(full, group_dst=0, op=dist.ReduceOp.SUM, group=ctx.dp_group)
    return full.float().cpu() if ctx.rank == 0 else None


def shared_cancel(cancel: threading.Event | None, shared: Callable[[], None]) -> Callable[[], bool]:
    """Rank 0's cancellation check: reads the caller's event and, once it is set, raises the
    workers' shared flag (via `shared`) so other replicas stop at their next micro-batch."""

    def check() -> bool:
        if cancel is not None and cancel.is_set():
            shared()
            return True
        return False

    return check
