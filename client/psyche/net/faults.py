"""Reporting what peers do wrong without letting them flood the log or hide in it.

A server records every fault a peer commits through a :class:`FaultLog`: a counter per kind of
fault and one log line per kind and peer, so a peer that sends garbage in a loop costs one line.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

__all__ = ["FaultLog"]


class FaultLog:
    """Counts faults per kind and logs the first fault of each kind from each peer, once.

    A peer is whatever the server can name it by: its key once it has authenticated, its address
    before. Counts per kind are totals over all peers (``counts``). The (peer, kind) pairs already
    logged are bounded by ``max_peers`` (the oldest is forgotten first), and first-fault lines
    share a budget of ``lines_per_minute``, so a host minting keys or cycling addresses can
    neither grow memory nor flood the log; lines over the budget are only counted, and the next
    line logged says how many were left out.
    """

    def __init__(
        self, logger: logging.Logger, max_peers: int = 4096, lines_per_minute: float = 30.0
    ) -> None:
        self.counts: dict[str, int] = {}
        self._log = logger
        self._max_peers = max_peers
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._rate = lines_per_minute / 60.0
        self._burst = lines_per_minute
        self._budget = lines_per_minute
        self._at = time.monotonic()
        self._unlogged = 0

    def record(self, peer: str, kind: str, detail: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        seen = self._seen.pop((peer, kind), 0)
        if not seen:
            if len(self._seen) >= self._max_peers:
                self._seen.popitem(last=False)
            self._first(peer, kind, detail)
        self._seen[peer, kind] = seen + 1

    def _first(self, peer: str, kind: str, detail: str) -> None:
        now = time.monotonic()
        self._budget = min(self._burst, self._budget + (now - self._at) * self._rate)
        self._at = now
        if self._budget < 1.0:
            self._unlogged += 1
            return
        self._budget -= 1.0
        left_out = f"; {self._unlogged} other first faults not logged" if self._unlogged else ""
        self._unlogged = 0
        self._log.warning(
            "%s: %s: %s (further faults of this kind from this peer are only counted%s)",
            peer,
            kind.replace("_", " "),
            detail.encode("utf-8", "backslashreplace").decode("utf-8"),
            left_out,
        )

    def of(self, peer: str, kind: str) -> int:
        """Faults of ``kind`` recorded for ``peer`` (0 once forgotten)."""
        return self._seen.get((peer, kind), 0)

    def summary(self) -> str:
        """``"1 idle timeout, 3 malformed"``, or ``"none"``."""
        parts = [f"{n} {k.replace('_', ' ')}" for k, n in sorted(self.counts.items())]
        return ", ".join(parts) or "none"
