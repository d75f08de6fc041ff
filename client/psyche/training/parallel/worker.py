"""The main loop of a worker process (ranks 1..N·M−1): pure compute, no DisTrO state.

A worker joins the client's process group, builds its replica, then serves commands from rank 0
until told to stop: each `train` command runs `step.run_step` (sync weights, compute its share,
reduce gradients to rank 0). It holds no optimizer, residual or canonical weights.

A worker must never outlive its client:

- a watchdog thread exits the process as soon as its parent (rank 0's process) is gone, which
  also covers a worker blocked inside a collective that would otherwise wait for its timeout;
- a failed collective or a closed control connection ends the loop and the process;
- SIGINT is ignored: Ctrl-C in a terminal reaches the whole process group, and rank 0 (which
  gets it too) is the one that decides to stop the workers, cleanly.

Errors in a step's compute are sent to rank 0 over the worker's pipe (rank 0 raises them) and the
worker goes on serving, so one bad step does not cost the client its workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import torch
import torch.distributed as dist

from psyche.training.device import enable_determinism
from psyche.training.parallel.rendezvous import WorkerArgs, join_group
from psyche.training.parallel.step import Command, RankContext, run_step

__all__ = ["ORPHAN_EXIT_CODE", "worker_main"]

ORPHAN_EXIT_CODE = 70
"""Exit status of a worker whose client process disappeared."""

_WATCHDOG_PERIOD_S = 0.5


def _watch_parent(parent_pid: int) -> None:
    def watch() -> None:
        while True:
            # A dead parent's children are re-parented, so the parent pid changes.
            if os.getppid() != parent_pid:
                os._exit(ORPHAN_EXIT_CODE)
            time.sleep(_WATCHDOG_PERIOD_S)

    threading.Thread(target=watch, name="psyche-parent-watchdog", daemon=True).start()


def _send(conn: Connection, kind: str, rank: int, text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        conn.send((kind, rank, text))


def _serve(ctx: RankContext, conn: Connection, cancel: Event) -> None:
    while True:
        box: list[Command | None] = [None]
        dist.broadcast_object_list(box, group_src=0, group=ctx.control_group)
        command = box[0]
        if command is None or command.kind == "stop":
            return
        result = run_step(ctx, command, None, cancel.is_set)
        if result.error is not None:
            text = "".join(traceback.format_exception(result.error))
            _send(conn, "error", ctx.rank, text)


def worker_main(args: WorkerArgs, conn: Connection, cancel: Event) -> None:
    """Entry point of a spawned worker (see module doc)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(args.parent_pid)
    _send(conn, "ready", args.rank, "")
    code = 0
    try:
        enable_determinism(args.seed)
        store = dist.TCPStore(
            "127.0.0.1",
            args.store_port,
            args.layout.world_size,
            is_master=False,
            timeout=timedelta(seconds=args.timeout_s),
        )
        ctx = join_group(
            args.rank,
            args.layout,
            store,
            torch.device(args.device),
            args.spec,
            timeout_s=args.timeout_s,
            report_error=lambda text: _send(conn, "error", args.rank, text),
        )
        _serve(ctx, conn, cancel)
    except Exception as e:
        # Typically rank 0 went away mid-collective; there is nobody left to report to. When
        # it is gone (killed, or exited without closing us), one line says so: a traceback
        # would read as a crash of the worker.
        if os.getppid() != args.parent_pid or "closed by peer" in str(e):
            print(
                f"psyche parallel worker {args.rank}: the client went away; exiting",
                file=sys.stderr,
            )
        else:
            traceback.print_exc(file=sys.stderr)
        code = 1
    finally:
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        conn.close()
    if code:
        sys.exit(code)
