"""A readable status line per train step, for people watching a client's log.

The event log is for programs; this sink turns the same records into one INFO line per train
step (here cut in two)::

    step 12 · loss 5.431 · lr 4.0e-04 · 1.2k tok/s · 0.84 s · payload 3.6 kB
        · evals synth 0.80 (40 docs)

and one line per task of an eval pass. Eval passes are rare (once per epoch) and train steps
frequent, so the latest eval scores are repeated on every train line: whoever looks at the log
sees them without scrolling back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from psyche.events import AnyEvent, EvalEvent, TrainEvent

__all__ = ["StatusLine", "format_bytes", "format_count", "format_eval", "format_train"]

SEP = " · "


def format_count(x: float) -> str:
    """``950``, ``1.2k``, ``3.4M``, ``5.6G``: short, and precise enough to see a trend."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= limit:
            return f"{x / limit:.1f}{suffix}"
    return f"{x:.0f}"


def format_bytes(n: int) -> str:
    """``512 B``, ``3.6 kB``, ``1.2 MB``: decimal units, as network rates are quoted."""
    for limit, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= limit:
            return f"{n / limit:.1f} {unit}"
    return f"{n} B"


def _score(e: EvalEvent) -> str:
    docs = f"{e.docs} docs" if e.complete else f"{e.docs} docs, partial"
    return f"{e.task} {e.accuracy:.2f} ({docs})"


def format_train(e: TrainEvent, evals: Iterable[EvalEvent] = ()) -> str:
    """The train step's line; fields a log written before they existed lacks are left out."""
    parts = [f"step {e.step}", f"loss {e.loss:.3f}"]
    if e.lr is not None:
        parts.append(f"lr {e.lr:.1e}")
    if e.tokens > 0 and e.compute_s > 0:
        parts.append(f"{format_count(e.tokens / e.compute_s)} tok/s")
    parts.append(f"{e.seconds:.2f} s")
    parts.append(f"payload {format_bytes(e.payload_bytes)}")
    scores = [_score(x) for x in evals]
    if scores:
        parts.append("evals " + ", ".join(scores))
    return SEP.join(parts)


def format_eval(e: EvalEvent) -> str:
    """One task's result of an eval pass."""
    parts = [
        f"eval step {e.step}",
        e.task,
        f"acc {e.accuracy:.3f}",
        f"acc_norm {e.accuracy_norm:.3f}",
        f"{e.docs} docs",
    ]
    if not e.complete:
        parts.append("cut short")
    return SEP.join(parts)


class StatusLine:
    """An event sink that logs :func:`format_train` and :func:`format_eval` lines at INFO."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger if logger is not None else logging.getLogger("psyche.status")
        self.evals: dict[str, EvalEvent] = {}
        """The latest score of each task, in the order tasks were first seen."""

    def on_event(self, event: AnyEvent) -> None:
        if isinstance(event, TrainEvent):
            self.logger.info("%s", format_train(event, self.evals.values()))
        elif isinstance(event, EvalEvent):
            self.evals[event.task] = event
            self.logger.info("%s", format_eval(event))

    def close(self) -> None:
        """Nothing to release."""
