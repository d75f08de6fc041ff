"""Handling bytes from untrusted peers: one place to decode them, one way to report them.

Every network decoder of the client (centralized protocol, data wire, P2P control frames and
gossip announcements, checkpoint JSON) goes through :func:`decode_untrusted`, so whatever hostile
input makes a decoder raise ends as the caller's typed protocol error. The servers report such
input through a :class:`FaultLog`: a counter per kind of fault and one log line per kind and
peer, so a peer that sends garbage in a loop neither floods the log nor hides in it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

import msgspec

__all__ = ["FaultLog", "decode_untrusted"]

_In = TypeVar("_In")
_Out = TypeVar("_Out")

# A schema error is not all that hostile bytes can raise. msgspec and json recurse once per
# nesting level, so a few kilobytes of nested arrays raise RecursionError before any schema check;
# msgspec raises UnicodeDecodeError (not a MsgspecError) for invalid UTF-8 in a msgpack string;
# json accepts lone surrogates ("\ud800") that blow up as UnicodeEncodeError wherever the text is
# encoded later; validators raise ValueError. UnicodeError and JSONDecodeError are ValueErrors.
_DECODE_ERRORS = (msgspec.MsgspecError, RecursionError, ValueError)


def decode_untrusted(
    decode: Callable[[_In], _Out], data: _In, error: Callable[[str], Exception], what: str
) -> _Out:
    """``decode(data)``, with anything hostile input can make it raise turned into ``error``.

    The message is ``"{what}: {reason}"``, made safe to log and to put on the wire (a reason may
    quote the peer's lone surrogates, which a UTF-8 log stream or encoder would choke on).
    """
    try:
        return decode(data)
    except _DECODE_ERRORS as e:
        raise error(f"{what}: {safe_reason(e)}") from None


def safe_reason(e: BaseException) -> str:
    """``str(e)`` that always encodes as UTF-8 (lone surrogates escaped)."""
    reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
    return reason.encode("utf-8", "backslashreplace").decode("utf-8")


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
