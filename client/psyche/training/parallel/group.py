"""Rank 0's handle on its worker processes: spawn, rendezvous, send commands, shut down.

Workers are started with torch.multiprocessing's *spawn* context (a fork of a process that has
touched CUDA or holds threads is unsafe) as daemon processes. Startup is staged so that every
failure surfaces as an exception in the client instead of a hang: each worker reports over a
pipe that it is running before anyone blocks in the rendezvous, and `join_group` checks that
every replica was built.

`close()` is idempotent: it tells the workers to stop, waits briefly, then terminates and kills
whatever is left, and destroys the process group (so a later trainer can start a new one in the
same process). If a step is interrupted half-way (an exception other than those the step protocol
reports), the collectives are out of step for good, so the workers are killed rather than told.
Only one group can exist per process (torch.distributed has a single default process group), so
starting a group closes the previous one if it is still open: a client that rebuilds its model
kit (after dropping out) may still hold the old trainer somewhere, and the new one must win.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from datetime import timedelta
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from psyche.training.parallel.layout import ParallelLayout, device_for_rank
from psyche.training.parallel.rendezvous import WorkerArgs, join_group
from psyche.training.parallel.replica import ModelSpec
from psyche.training.parallel.step import Command, StepResult, run_step, shared_cancel
from psyche.training.parallel.worker import worker_main

__all__ = ["WorkerGroup"]

log = logging.getLogger(__name__)

_STOP_WAIT_S = 10.0
_KILL_WAIT_S = 5.0

_active: weakref.ref[WorkerGroup] | None = None
"""The open group of this process, if any (see module doc)."""


def _close_the_previous_group() -> None:
    """Only one group per process: close this process's open one, if any (see module doc)."""
    previous = _active() if _active is not None else None
    if previous is not None and not previous.closed:
        log.warning("closing the previous parallel trainer's workers to start new ones")
        previous.close()
    if dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is already initialised in this process: close the previous "
            "parallel trainer before building another"
        )


class WorkerGroup:
    """Ranks 1..N·M−1 as processes, and rank 0's side of the process group (this process)."""

    def __init__(
        self,
        layout: ParallelLayout,
        device: torch.device,
        canonical: torch.nn.Module,
        *,
        seed: int,
        timeout_s: float = 1800.0,
        startup_timeout_s: float = 300.0,
    ) -> None:
        global _active
        _close_the_previous_group()
        self.layout = layout
        self._lock = threading.Lock()
        self._closed = False
        self._broken = False
        self._procs: list[BaseProcess] = []
        self._conns: list[Connection] = []
        self._pids: list[int] = []
        spawn = tmp.get_context("spawn")
        self._cancel = spawn.Event()
        spec = ModelSpec.of(canonical)
        devices = [device_for_rank(device, r, layout) for r in range(layout.world_size)]
        store = dist.TCPStore(
            "127.0.0.1",
            0,
            layout.world_size,
            is_master=True,
            timeout=timedelta(seconds=startup_timeout_s),
            wait_for_workers=False,
        )
        try:
            for rank in range(1, layout.world_size):
                args = WorkerArgs(
                    rank=rank,
                    layout=layout,
                    store_port=store.port,
                    device=str(devices[rank]),
                    spec=spec,
                    parent_pid=os.getpid(),
                    timeout_s=timeout_s,
                    seed=seed,
                )
                self._start_worker(spawn, args)
            self._await_ready(time.monotonic() + startup_timeout_s)
            self.ctx = join_group(
                0, layout, store, devices[0], spec, timeout_s=timeout_s, canonical=canonical
            )
        except BaseException as e:
            messages = self._worker_errors(1, wait_s=1.0)
            self._broken = True
            self.close()
            if messages and isinstance(e, Exception):
                raise RuntimeError(f"parallel workers failed to start: {messages}") from e
            raise
        self._store = store  # rank 0 hosts the rendezvous; it must live as long as the group
        _active = weakref.ref(self)

    def _start_worker(self, spawn: SpawnContext, args: WorkerArgs) -> None:
        """Start one rank's process, with the pipe it reports over (startup, errors)."""
        receiver, sender = spawn.Pipe(duplex=False)
        proc = spawn.Process(
            target=worker_main,
            args=(args, sender, self._cancel),
            name=f"psyche-parallel-rank{args.rank}",
            daemon=True,
        )
        proc.start()
        sender.close()
        self._pids.append(proc.pid or 0)
        self._procs.append(proc)
        self._conns.append(receiver)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pids(self) -> list[int]:
        """Worker process ids (for tests and logs), also after `close`."""
        return list(self._pids)

    def _await_ready(self, deadline: float) -> None:
        pending = dict(enumerate(self._conns))
        while pending:
            for i, conn in list(pending.items()):
                proc = self._procs[i]
                if conn.poll(0.05):
                    kind, rank, text = conn.recv()
                    if kind != "ready":
                        raise RuntimeError(f"parallel worker {rank} failed to start: {text}")
                    del pending[i]
                elif not proc.is_alive():
                    raise RuntimeError(
                        f"parallel worker {proc.name} exited during startup "
                        f"(exit code {proc.exitcode})"
                    )
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} parallel worker(s) did not start in time")

    def _worker_errors(self, expected: int, wait_s: float) -> str:
        """The workers' error messages: all that are waiting, and more until `expected` have
        arrived or `wait_s` has passed (a worker sends its message just after the step's last
        collective, so it may still be on its way)."""
        messages: list[str] = []
        deadline = time.monotonic() + wait_s
        while True:
            for conn in self._conns:
                with contextlib.suppress(OSError, EOFError):
                    while conn.poll():
                        kind, rank, text = conn.recv()
                        if kind == "error":
                            messages.append(f"rank {rank}: {text.strip()}")
            if len(messages) >= expected or time.monotonic() >= deadline:
                return "\n".join(messages)
            time.sleep(0.02)

    def step(
        self,
        command: Command,
        canonical: torch.nn.Module,
        cancel: threading.Event | None,
    ) -> StepResult:
        """Run one train step on all ranks (see `step.run_step`); raises if a rank failed."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the parallel workers have been stopped (trainer closed)")
            self._cancel.clear()
            try:
                box: list[Command | None] = [command]
                dist.broadcast_object_list(box, group_src=0, group=self.ctx.control_group)
                result = run_step(
                    self.ctx, command, canonical, shared_cancel(cancel, self._cancel.set)
                )
            except BaseException:
                self._broken = True
                raise
            finally:
                if self._broken:
                    self._close_locked()
        if result.failed:
            # Read every message now, so that none is mistaken for a later step's.
            own = result.error is not None
            messages = self._worker_errors(result.failures - own, wait_s=5.0)
            if result.error is not None:
                if messages:
                    result.error.add_note(f"parallel workers failed too:\n{messages}")
                raise result.error
            messages = messages or "no message (see the workers' stderr)"
            raise RuntimeError(f"a parallel worker failed this step:\n{messages}")
        return result

    def close(self) -> None:
        """Stop the workers and leave the process group; safe to call any number of times."""
        # A step still running elsewhere (the interpreter exiting under a training thread) gets
        # a bounded wait; then the workers are killed rather than told.
        got = self._lock.acquire(timeout=_STOP_WAIT_S)
        try:
            if not got:
                self._broken = True
            self._close_locked()
        finally:
            if got:
                self._lock.release()

    def _close_locked(self) -> None:
        if self._closed:
            return
        self._closed = True
        alive = all(p.is_alive() for p in self._procs)
        if not self._broken and alive and hasattr(self, "ctx"):
            with contextlib.suppress(Exception):
                box: list[Command | None] = [Command("stop")]
                dist.broadcast_object_list(box, group_src=0, group=self.ctx.control_group)
        deadline = time.monotonic() + (0.0 if self._broken else _STOP_WAIT_S)
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(_KILL_WAIT_S)
            if proc.is_alive():
                proc.kill()
                proc.join(_KILL_WAIT_S)
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            with contextlib.suppress(ValueError):
                proc.close()
