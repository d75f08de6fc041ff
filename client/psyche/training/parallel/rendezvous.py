"""Joining a client's process group: the same calls on rank 0 and on every worker.

- Rendezvous through a `TCPStore` that rank 0 hosts on 127.0.0.1 with an OS-chosen port (no
  port guessing, no race with other clients on the machine); workers get the port at spawn.
- Compute backend: NCCL on CUDA (rank r on its own device), gloo on CPU.
- A separate gloo group carries control messages (pickled `Command`s). Workers wait on it between
  steps, which may be many minutes apart, so its timeout is long; the compute group keeps the
  caller's timeout so that a stuck collective fails instead of hanging.
- The `(dp, tp)` device mesh gives each rank its DP group and its 1-D TP sub-mesh.
- Each rank builds its compute replica (rank 0 with TP=1 computes on the canonical model itself),
  then all ranks agree that every replica was built, so a worker that cannot build its model
  fails the client's startup with its own error message instead of a later timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from psyche.training.parallel.layout import ParallelLayout
from psyche.training.parallel.replica import ModelSpec, build_replica, sync_names, trainable_names
from psyche.training.parallel.step import RankContext

__all__ = ["CONTROL_TIMEOUT", "WorkerArgs", "join_group"]

CONTROL_TIMEOUT = timedelta(days=30)
"""How long a worker may wait for rank 0's next command (rounds can be far apart)."""


@dataclass(frozen=True, slots=True)
class WorkerArgs:
    """Everything a spawned worker needs; picklable."""

    rank: int
    layout: ParallelLayout
    store_port: int
    device: str
    spec: ModelSpec
    parent_pid: int
    timeout_s: float
    seed: int


def join_group(
    rank: int,
    layout: ParallelLayout,
    store: dist.Store,
    device: torch.device,
    spec: ModelSpec,
    *,
    timeout_s: float,
    canonical: torch.nn.Module | None = None,
    report_error: Callable[[str], None] | None = None,
) -> RankContext:
    """Init the process group, the control group and the mesh, and build this rank's replica.

    Raises `RuntimeError` on every rank if any rank failed to build its replica (after that rank
    has passed its message to `report_error`).
    """
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        store=store,
        rank=rank,
        world_size=layout.world_size,
        timeout=timedelta(seconds=timeout_s),
        device_id=device if cuda else None,
    )
    control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
    # new_group returns a sentinel to ranks outside the group; every rank is inside this one.
    assert isinstance(control, dist.ProcessGroup)
    mesh = init_device_mesh(device.type, layout.mesh_shape, mesh_dim_names=("dp", "tp"))
    owns = canonical is not None and layout.tp == 1
    model: torch.nn.Module | None = canonical if owns else None
    failed = 0.0
    if model is None:
        try:
            model = build_replica(spec, device, mesh["tp"])
        except Exception as e:
            failed = 1.0
            if report_error is not None:
                report_error(f"rank {rank}: cannot build the model replica: {e!r}")
    ok = torch.tensor([failed], device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MAX)
    if ok.item() > 0 or model is None:
        raise RuntimeError("a parallel worker could not build its model replica")
    return RankContext(
        rank=rank,
        layout=layout,
        device=device,
        model=model,
        tp_mesh=mesh["tp"],
        dp_group=mesh["dp"].get_group(),
        control_group=control,
        trainable=trainable_names(spec),
        synced=sync_names(spec),
        owns_canonical=owns,
    )
