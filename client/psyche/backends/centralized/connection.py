"""One client connection of the centralized server: its send queue and its rate limit.

Writes go through one queue per connection, drained by its own task, so a slow reader never
blocks the tick or other clients; a connection whose backlog exceeds ``max_backlog`` frames or
whose writes stall for ``send_timeout`` is dropped (it reconnects and gets the latest state).
Each connection holds at most one unsent peer list (a newer one replaces it), so peer-list churn
can never fill anyone's backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from psyche.net.service import Connection
from psyche.protocol.identity import NodeIdentity

__all__ = ["ClientConnection"]

log = logging.getLogger(__name__)

# Queued in place of a peer list: the sender takes the latest list from ``_peers`` when it
# reaches this item (real frames are never empty: they start with a 4-byte length).
_PEERS_SLOT = b""


class ClientConnection(Connection):
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        send_timeout: float,
        max_backlog: int,
        p2p_addrs_burst: int,
        p2p_addrs_per_second: float,
    ) -> None:
        super().__init__(reader, writer)
        self.identity: NodeIdentity | None = None
        self._send_timeout = send_timeout
        self._max_backlog = max_backlog
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._peers: bytes | None = None
        self._p2p_rate = p2p_addrs_per_second
        self._p2p_burst = float(p2p_addrs_burst)
        self._p2p_tokens = self._p2p_burst
        self._p2p_at = time.monotonic()
        self._sender = asyncio.create_task(self._send_loop())

    def authenticated(self, who: NodeIdentity) -> None:
        self.identity = who
        self.label = who.hex()

    def send(self, data: bytes) -> None:
        if self._queue.qsize() >= self._max_backlog:
            log.warning("%s: %d frames behind, dropping it", self.name, self._queue.qsize())
            self.abort()
            return
        self._queue.put_nowait(data)

    def send_peers(self, data: bytes) -> None:
        """Queue a peer list; one still waiting in the queue is replaced, not added to."""
        waiting = self._peers is not None
        self._peers = data
        if not waiting:
            self.send(_PEERS_SLOT)

    def take_p2p_token(self) -> bool:
        """Whether one more ``P2PAddrs`` frame is within this connection's rate limit."""
        now = time.monotonic()
        self._p2p_tokens = min(
            self._p2p_burst, self._p2p_tokens + (now - self._p2p_at) * self._p2p_rate
        )
        self._p2p_at = now
        if self._p2p_tokens < 1.0:
            return False
        self._p2p_tokens -= 1.0
        return True

    async def close(self) -> None:
        """Flush what is queued (bounded by ``send_timeout``), then close."""
        self._queue.put_nowait(None)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self._send_timeout):
                await asyncio.shield(self._sender)
        self._sender.cancel()
        await super().close()

    async def _send_loop(self) -> None:
        try:
            while (data := await self._queue.get()) is not None:
                if data == _PEERS_SLOT:
                    data, self._peers = self._peers, None
                    if data is None:
                        continue
                self.writer.write(data)
                async with asyncio.timeout(self._send_timeout):
                    await self.writer.drain()
        except (OSError, TimeoutError) as e:
            log.info("%s: send failed (%s), dropping it", self.name, e or type(e).__name__)
            self.abort()
