"""Saved run states of the centralized server (``--save-state-dir``).

At every successful epoch end the server writes the coordinator to ``{run_id}-step{step}.json``
(``step`` = the next step to train). On start it restores the newest file of its run, so a
restarted server continues the run instead of starting it over.

Why JSON and not the reference's TOML: the file is the coordinator's serde JSON
(:mod:`psyche.coordinator.state_json`), the same form as the wire state and the shared test vectors,
so it round-trips every field exactly (TOML has no null, and the reference lost fields to
``reset_ephemeral`` before writing) and is read back through the same strict validating decoder.

What a restore takes from the file, and why only that: epoch, step, checkpoint and the data index
(plus the cold-start flag and the queue of lost intervals still to re-assign) are the run's
*progress*; the config and the rest of the model come from the ``state.toml`` the server was
started with, so an operator can change timings between restarts. Nobody is connected after a
restart, so the run goes back to WaitingForMembers with no epoch clients (a Paused or Finished run
stays so).

Files are written atomically (temporary file, then rename), so a crash never leaves a truncated
newest state; unreadable or foreign files, and files whose checkpoint breaks the checkpoint rules
(``Checkpoint.check``), are skipped with a warning rather than blocking a start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import urllib.parse
from pathlib import Path

from psyche.coordinator import state_json as serde
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import EpochState, Progress, RunState
from psyche.protocol.strict_obj import ConfigError

__all__ = ["StateStore", "restore_progress"]

log = logging.getLogger(__name__)


def _file_stem(run_id: str) -> str:
    # Run ids are free text (≤ 32 bytes); keep the common ones readable and the rest file-safe.
    return urllib.parse.quote(run_id, safe="")


class StateStore:
    """The saved states of one run in one directory."""

    def __init__(self, directory: str | os.PathLike[str], run_id: str) -> None:
        self.directory = Path(directory)
        self.run_id = run_id
        self._pattern = re.compile(re.escape(_file_stem(run_id)) + r"-step(\d+)\.json")

    def path_for(self, step: int) -> Path:
        return self.directory / f"{_file_stem(self.run_id)}-step{step}.json"

    def save(self, coordinator: Coordinator) -> Path:
        """Write ``coordinator`` as the state after step ``progress.step - 1``."""
        if coordinator.run_id != self.run_id:
            raise ValueError(f"state of run {coordinator.run_id!r} in the store of {self.run_id!r}")
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path_for(coordinator.progress.step)
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(serde.to_json(coordinator))
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return path

    def saved_steps(self) -> list[tuple[int, Path]]:
        """(step, path) of every file of this run, newest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for p in self.directory.iterdir():
            m = self._pattern.fullmatch(p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), p))
        return sorted(found, reverse=True)

    def load_newest(self) -> tuple[Coordinator, Path] | None:
        """The newest valid saved state of this run, or ``None`` if there is none."""
        for _, path in self.saved_steps():
            try:
                state = serde.from_json(path.read_bytes())
            except (OSError, ConfigError) as e:
                log.warning("skipping saved state %s: %s", path, e)
                continue
            if state.run_id != self.run_id:
                log.warning("skipping saved state %s: it is of run %r", path, state.run_id)
                continue
            # The checkpoint is the one part of the saved model a restore keeps: an edited file
            # must not hand every client an unloadable model.
            try:
                state.llm.checkpoint.check()
            except ConfigError as e:
                log.warning("skipping saved state %s: %s", path, e)
                continue
            return state, path
        return None


def restore_progress(base: Coordinator, saved: Coordinator) -> Coordinator:
    """``base`` (from state.toml) carrying ``saved``'s progress and checkpoint, ready to accept
    members again. Neither argument is modified."""
    out = base.clone()
    out.progress = dataclasses.replace(saved.progress)
    assert isinstance(saved.model, type(out.model))
    out.model = dataclasses.replace(out.llm, checkpoint=saved.llm.checkpoint)
    # The lost-work queue is progress too: intervals nobody trained yet (docs/protocol.md #15).
    out.epoch_state = EpochState(
        cold_start_epoch=saved.epoch_state.cold_start_epoch, lost=list(saved.epoch_state.lost)
    )
    out.pending_pause = False
    if saved.run_state in (RunState.Paused, RunState.Finished):
        out.run_state = saved.run_state
    elif out.progress.step >= out.config.total_steps:
        out.run_state = RunState.Finished
    else:
        out.run_state = RunState.WaitingForMembers
    return out


def progress_summary(p: Progress) -> str:
    return f"epoch {p.epoch}, step {p.step}, data index {p.epoch_start_data_index}"
