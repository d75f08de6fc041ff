"""Yamux receive credit in steps of 16 KiB or more, not after every read (host process).

py-libp2p 0.8.1's ``YamuxStream._auto_tune_and_send_window_update`` runs after every read and,
short of half a window, still sends a ``WINDOW_UPDATE`` frame for the bytes just read (its
"partial slack" and "release on read" branches). Protocol negotiation reads varints a byte at a
time, so every stream opened costs a handful of frames that carry nothing, each encrypted,
written and then parsed by the peer: in a 24-host ``bench/scale.py --p2p-hosts`` run they were
half of the frames a host wrote and about 14 % of its event loop's busy time (py-spy).

:func:`send_credit_in_steps` replaces that method, in this process only: the peer is credited
once the bytes consumed since its last update reach :data:`CREDIT_STEP` or half the target
window, whichever is less (go-yamux waits for half a window; the smaller step keeps bulk
transfers as fast as before), growing the target as the library's auto-tuning does. A sender
never waits for credit it needs: it may have a whole window in flight and gets it back as soon
as the reader has consumed a step. docs/p2p-nat.md, "py-libp2p defects", item 11.
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any

from libp2p.stream_muxer.yamux.yamux import YamuxStream

__all__ = ["CREDIT_STEP", "PATCHED_VERSION", "send_credit_in_steps"]

log = logging.getLogger(__name__)

PATCHED_VERSION = "0.8.1"
"""The py-libp2p release whose YamuxStream internals the replacement relies on."""

CREDIT_STEP = 16 * 1024
"""Bytes consumed that earn the peer an update even short of half a window. In a bulk transfer
nearly every read consumes more, so credit flows back per read as before (waiting for half
a window cost a 16 MB blob 1.05-1.3x the wall time on loopback); the few-byte reads of
negotiation and requests never reach it."""

_REQUIRED = ("_grow_threshold", "_grow_to_delta", "_apply_autotune_epoch", "send_window_update")


async def _credit_in_steps(self: Any, *, bytes_read: int = 0) -> None:
    total = 0
    async with self.window_lock:
        buffered = len(self.conn.stream_buffers.get(self.stream_id, b""))
        # Bytes the reader consumed since the peer was last credited.
        consumed = self.target_recv_window - (self.recv_window + buffered)
        if consumed > 0 and consumed >= min(self._grow_threshold(), CREDIT_STEP):
            total = self._grow_to_delta(buffered)
            total += self._apply_autotune_epoch(buffered)
    if total > 0:
        await self.send_window_update(total, skip_lock=True)


def send_credit_in_steps() -> bool:
    """Install the replacement; False (library left as it is) on another py-libp2p release."""
    version = importlib.metadata.version("libp2p")
    if version != PATCHED_VERSION or not all(hasattr(YamuxStream, a) for a in _REQUIRED):
        log.debug("py-libp2p %s: Yamux credit left to the library", version)
        return False
    YamuxStream._auto_tune_and_send_window_update = _credit_in_steps  # type: ignore[method-assign]
    return True
