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
from typing import Any


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
