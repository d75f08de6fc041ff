"""Weights & Biases charts of a client's events, through W&B's own client library.

One W&B run per client process. The run is online when W&B has credentials (``WANDB_API_KEY``,
``WANDB_IDENTITY_TOKEN_FILE`` or a saved ``wandb login``), and offline otherwise: then W&B keeps
the run on disk and ``wandb sync <dir>`` uploads it later. ``WANDB_MODE`` in the environment always
wins (``disabled`` included). Nothing of W&B may stop a client from training, so a failure to start
or to log is a warning that turns the sink off, never an exception.

The W&B step is the coordinator step. W&B drops (with a warning) any row whose step is below the
last one logged, and a record can arrive late (an eval pass finishing after the next train step),
so a record for an older step is logged at the latest step instead, and eval rows carry the step
they measured as ``eval/step``.
"""

from __future__ import annotations

import logging
import netrc
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from psyche.events import (
    AnyEvent,
    ApplyEvent,
    CheckpointEvent,
    EvalEvent,
    ModelLoadedEvent,
    OptimStatsEvent,
    RejectionsEvent,
    TrainEvent,
    UploadEvent,
)

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

__all__ = ["WandbOptions", "WandbSink", "choose_mode", "wandb_row"]

log = logging.getLogger("psyche.metrics")

DEFAULT_BASE_URL = "https://api.wandb.ai"


@dataclass(frozen=True, slots=True)
class WandbOptions:
    project: str
    run: str | None = None
    """The run's display name (default ``client-<first 8 hex digits of the identity>``)."""
    group: str | None = None
    """Groups the runs of one training run's clients in the W&B UI."""
    entity: str | None = None
    dir: str | Path | None = None
    """Where W&B writes its ``wandb/`` folder (default ``WANDB_DIR``, then the working dir)."""


def _saved_login(environ: Mapping[str, str]) -> bool:
    """Whether ``wandb login`` left a key for the W&B server in the netrc file. Read with the
    standard library: W&B's own reader is private API, and asking the server needs network."""
    path = Path(environ.get("NETRC") or Path.home() / ".netrc")
    host = urlsplit(environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).hostname
    if host is None:
        return False
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def choose_mode(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(mode, why)``: ``WANDB_MODE`` if set, else online with credentials, else offline."""
    env = os.environ if environ is None else environ
    if mode := env.get("WANDB_MODE"):
        return mode, "WANDB_MODE is set"
    if env.get("WANDB_API_KEY"):
        return "online", "WANDB_API_KEY is set"
    if env.get("WANDB_IDENTITY_TOKEN_FILE"):
        return "online", "WANDB_IDENTITY_TOKEN_FILE is set"
    if _saved_login(env):
        return "online", "a saved `wandb login` was found"
    return "offline", "no WANDB_API_KEY and no saved `wandb login`"


def wandb_row(event: AnyEvent) -> tuple[int | None, dict[str, Any]] | None:
    """The W&B step (None: the latest) and values an event charts, or None for kinds not
    charted (coordinator states, transactions, ``finished``)."""
    if isinstance(event, TrainEvent):
        row: dict[str, Any] = {
            "train/loss": event.loss,
            "train/step_s": event.seconds,
            "train/compute_s": event.compute_s,
            "train/payload_bytes": event.payload_bytes,
        }
        if event.lr is not None:
            row["train/lr"] = event.lr
        if event.tokens > 0:
            row["train/tokens"] = event.tokens
            if event.compute_s > 0:
                row["train/tokens_per_s"] = event.tokens / event.compute_s
        return event.step, row
    if isinstance(event, ApplyEvent):
        return event.step, {"apply/batches": event.batches}
    if isinstance(event, EvalEvent):
        base = f"eval/{event.task}"
        return event.step, {
            f"{base}/acc": event.accuracy,
            f"{base}/acc_norm": event.accuracy_norm,
            f"{base}/docs": event.docs,
            "eval/step": event.step,
        }
    if isinstance(event, OptimStatsEvent):
        return event.step, {f"optim/{k}": v for k, v in event.stats.items()}
    if isinstance(event, RejectionsEvent):
        # Cumulative counts of this process, which is this run: charted as they are.
        return None, {f"p2p/rejections/{k}": v for k, v in event.counts.items()}
    if isinstance(event, CheckpointEvent):
        return event.step, {"checkpoint/step": event.step}
    if isinstance(event, UploadEvent):
        return event.step, {"upload/step": event.step}
    if isinstance(event, ModelLoadedEvent):
        row = {"model/loaded_step": event.step}
        if event.seconds is not None:
            row["model/p2p_load_s"] = event.seconds
        return event.step, row
    return None


class WandbSink:
    """An event sink (``EventLog(..., sinks=[WandbSink(...)])``) that charts events in W&B.

    The run starts here (W&B's service process with it); :meth:`close` finishes the run and
    stops that process. ``config`` is the run's W&B config (the client adds its identity).
    """

    def __init__(self, options: WandbOptions, *, client: str, config: Mapping[str, Any]) -> None:
        self.options = options
        self.client = client
        self.mode, why = choose_mode()
        self.sync_dir: str | None = None
        """The run's local folder (what ``wandb sync`` takes); None until the run started."""
        self._run: Run | None = None
        self._logging = False
        self._step = 0
        # The event log calls sinks under its own lock, but a sink is also usable alone.
        self._lock = threading.Lock()
        if self.mode == "disabled":
            log.info("W&B is off for this client: WANDB_MODE=disabled")
            return
        try:
            import wandb

            if options.dir is not None:
                # W&B needs the folder to exist; it would otherwise fall back to a temporary one.
                Path(options.dir).mkdir(parents=True, exist_ok=True)
            self._run = wandb.init(
                project=options.project,
                entity=options.entity,
                group=options.group,
                name=options.run or f"client-{client[:8]}",
                dir=str(options.dir) if options.dir is not None else None,
                mode=self.mode,  # type: ignore[arg-type]  # any WANDB_MODE W&B knows
                config={**config, "client": client},
                # console off: W&B would wrap stdout/stderr, which the client's own log handlers
                # and TUI own; silent: this sink says itself what W&B does, in the client's log.
                settings=wandb.Settings(console="off", silent=True),
                reinit="create_new",
            )
            self.sync_dir = str(self._run.settings.sync_dir)
        except Exception as e:
            log.warning("W&B is off for this client: starting the run failed: %s", e)
            self._run = None
            return
        self._logging = True
        if self.mode == "offline":
            log.info(
                "W&B is offline (%s): the run is kept locally in %s; upload it later with "
                "`wandb sync %s`",
                why,
                self.sync_dir,
                self.sync_dir,
            )
        else:
            log.info("W&B run %s (%s, %s): %s", self._run.name, self.mode, why, self._run.url)

    @property
    def active(self) -> bool:
        """Whether events still go to W&B (False after a failure, or once closed)."""
        return self._logging

    def on_event(self, event: AnyEvent) -> None:
        found = wandb_row(event)
        if found is None:
            return
        step, row = found
        with self._lock:
            if not self._logging or self._run is None or not row:
                return
            if step is not None and step < self._step:
                log.debug(
                    "W&B: %s of step %d logged at step %d", type(event).__name__, step, self._step
                )
            self._step = max(self._step, step if step is not None else self._step)
            try:
                self._run.log(row, step=self._step)
            except Exception as e:
                self._logging = False
                log.warning("W&B is off for this client: logging failed: %s", e)

    def close(self) -> None:
        """Finish the run (an offline one is complete on disk after this) and stop W&B's
        service process, unless another run of this process still uses it."""
        with self._lock:
            run, self._run = self._run, None
            self._logging = False
        if run is None:
            return
        try:
            import wandb

            run.finish()
            if wandb.run is None:
                wandb.teardown()
        except Exception as e:
            log.warning("W&B: finishing the run failed: %s", e)
            return
        if self.mode == "offline":
            log.info(
                "W&B run kept offline in %s; upload it with `wandb sync %s`",
                self.sync_dir,
                self.sync_dir,
            )
