"""Evals during training: one pass over the ``--eval-tasks`` per epoch, in Cooldown.

Why Cooldown: it is the one phase in which the weights hold still for a while (the epoch's last
apply is done and the next epoch's first lookahead has not started), so every document of a
pass is scored on the same weights, which are the ones the epoch's checkpoint holds. The pass
runs in a worker thread beside the Cooldown's own work (serving and checkpointing only read the
weights); the next training step calls :meth:`Evaluating.stop` before it changes them, which
cuts a pass that is still running short between two batches. A cut pass is still reported, with
``complete=False`` and the number of documents it scored, so a slow evaluator shows partial
numbers instead of none.

The latest scores go to the event log (``eval`` records, which the metrics sinks turn into the
status line and W&B charts) and into :class:`~psyche.daemon.kit.ClientStats`, from which this
client's witness metadata reports them (``EvalResult(task index, accuracy)``, the index being the
task's position in ``--eval-tasks``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

from psyche.daemon.kit import ClientStats, ModelKit
from psyche.events import EvalEvent, EventLog

__all__ = ["EvalOptions", "Evaluating"]

log = logging.getLogger("psyche.daemon")


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalOptions:
    tasks: str
    """``--eval-tasks``: comma-separated task names, files or directories."""
    fewshot: int = 0
    seed: int = 42
    max_docs: int | None = None
    batch_size: int = 8


class Evaluating:
    """The client's eval passes. The tasks are read once, at start-up (:meth:`load`), so a bad
    ``--eval-tasks`` fails before the client joins; the harness is built from the model's own
    tokenizer files on the first pass."""

    def __init__(self, options: EvalOptions, events: EventLog, stats: ClientStats) -> None:
        self.options = options
        self.events = events
        self.stats = stats
        self._tasks: list[Any] | None = None
        self._harness: Any = None
        self._task: asyncio.Task[None] | None = None
        self._cancel = threading.Event()

    def load(self) -> None:
        """Read every task now; raises the tasks' own error (a clear message) when one is bad."""
        from psyche.evals import load_tasks

        self._tasks = list(load_tasks(self.options.tasks))

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, kit: ModelKit, step: int) -> None:
        """Begin a pass over the tasks on ``kit``'s current weights (unless one is running)."""
        if self.running:
            return
        self._cancel = threading.Event()
        self._task = asyncio.create_task(self._pass(kit, step, self._cancel))

    async def stop(self) -> None:
        """Cut a running pass short and wait for it (the weights are about to change)."""
        if self._task is None:
            return
        self._cancel.set()
        # asyncio.wait never raises what the pass raised; a CancelledError here is our own
        # caller's (SIGTERM), which must go on up: suppressing it kept the engine running.
        await asyncio.wait([self._task])
        self._task = None

    async def close(self) -> None:
        """Let a running pass finish (client shutdown: the final model's scores are worth
        having, as its checkpoint is)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([self._task])
            self._task = None

    async def _pass(self, kit: ModelKit, step: int, cancel: threading.Event) -> None:
        try:
            scores = await asyncio.to_thread(self._run, kit, cancel)
        except Exception as e:  # an eval must never take the training down
            log.warning("eval pass at step %d failed: %s", step, e)
            return
        for s in scores:
            self.events.write(
                EvalEvent(
                    step=step,
                    task=s.task,
                    index=s.index,
                    accuracy=s.accuracy,
                    accuracy_norm=s.accuracy_norm,
                    docs=s.docs,
                    complete=s.complete,
                )
            )
        self.stats.evals = {s.index: s for s in scores}

    def _run(self, kit: ModelKit, cancel: threading.Event) -> list[Any]:
        from psyche.evals import EvalHarness, tokenizer_from_files

        if self._tasks is None:
            self.load()
        if self._harness is None:
            o = self.options
            self._harness = EvalHarness(
                self._tasks or [],
                tokenizer_from_files(kit.files),
                fewshot=o.fewshot,
                seed=o.seed,
                max_docs=o.max_docs,
                batch_size=o.batch_size,
            )
        scores: list[Any] = self._harness.run(kit.trainer.model, cancel=cancel)
        return scores
