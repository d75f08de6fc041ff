"""A per-client JSON-lines event log (``train``, ``apply`` with the model hash, ``checkpoint``…).

The local testnet and the integration tests read these files to build the run summary and to
prove that every client held the same weights after every apply; humans can ``tail -f`` them.
Each line is one JSON object with ``t`` (unix seconds), ``event``, ``client`` and the fields.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psyche.coordinator import Coordinator


class EventLog:
    def __init__(self, path: str | Path | None, client: str) -> None:
        self.path = Path(path) if path is not None else None
        self.client = client
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: str, **fields: Any) -> None:
        if self.path is None:
            return
        line = json.dumps(
            {"t": round(time.time(), 3), "event": event, "client": self.client, **fields}
        )
        with self._lock, self.path.open("a") as f:
            f.write(line + "\n")


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """All events of one log; a torn last line (a killed client) is ignored."""
    out: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


class EventTail:
    """Follows a growing event log, parsing only what was appended since the last ``poll`` (a
    launcher polling every 0.5 s must not re-read the whole file each time)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.events: list[dict[str, Any]] = []
        self._offset = 0

    def poll(self) -> list[dict[str, Any]]:
        """The events appended since the last call (a torn last line waits for the next)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        new: list[dict[str, Any]] = []
        for line in data[:end].splitlines():
            try:
                new.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        self.events.extend(new)
        return new


def state_event(c: Coordinator) -> dict[str, Any]:
    """The fields of a coordinator state worth logging (the centralized server's events file,
    the Solana testnet's chain follower): enough to rebuild rounds and their end reasons."""
    rnd = c.current_round()
    return {
        "run_state": c.run_state.name,
        "epoch": c.progress.epoch,
        "step": c.progress.step,
        "height": rnd.height,
        "witnesses": len(rnd.witnesses),
        "witness_target": c.witness_count(),
        "clients": {x.id.hex(): x.state.name for x in c.epoch_state.clients},
        "checkpoint": checkpoint_label(c),
        "retries": [[b.start, b.end] for b in rnd.retries],
        "lost": len(c.epoch_state.lost),
    }


def checkpoint_label(c: Coordinator) -> str | None:
    """``Kind`` or ``Kind:repo`` for the run's checkpoint (the summary's checkpoint source)."""
    ck = getattr(c.model, "checkpoint", None)
    if ck is None:
        return None
    repo = getattr(ck, "repo", None)
    name = getattr(repo, "repo_id", None) or getattr(repo, "bucket", None)
    return f"{ck.TAG}:{name}" if name else str(ck.TAG)
