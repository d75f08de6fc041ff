"""A bounded asyncio TCP service: the part of a server that is the same for every protocol.

:class:`TcpService` accepts connections, runs a subclass's :meth:`~TcpService.authenticate`
under a time limit and then its :meth:`~TcpService.session`, and keeps what a server open to any
host needs so that strangers cost only themselves:

* every connection task is tracked, so :meth:`~TcpService.close` ends them all (Python 3.11's
  ``Server.close`` leaves accepted connections open) and aborts their sockets instead of waiting
  for peers that read nothing;
* ``max_connections_per_address`` bounds the connections one source address holds open at once;
* ``max_handshakes`` and ``max_handshakes_per_address`` bound the connections still in the
  handshake. A new connection over either bound evicts the oldest handshake of its own address,
  or else of the address holding the most, so a flood mostly evicts itself while an honest
  handshake (one round trip) gets through. Authenticated sessions do not count here, so idle
  unauthenticated sockets cannot lock real clients out;
* a handshake that does not finish within ``handshake_timeout`` is a fault;
* faults (any :class:`~psyche.net.errors.NetError`) are counted per kind in
  :attr:`~TcpService.faults` and logged once per kind and peer, never as a traceback; a dropped
  socket is one info line; only a bug in the service itself is logged with its traceback;
* accepted sockets get ``TCP_NODELAY`` (frames are small and latency-bound) and ``SO_KEEPALIVE``
  (a vanished host is noticed even on an idle connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Generic, TypeVar

from psyche.net.errors import HandshakeTimeout, NetError
from psyche.net.faults import FaultLog

__all__ = ["Connection", "TcpService"]


class Connection:
    """One accepted connection, as a :class:`TcpService` tracks it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        host, port = (writer.get_extra_info("peername") or ("?", "?"))[:2]
        self.host = str(host)
        self.peer = f"{host}:{port}"
        self.label: str | None = None
        """How the peer is named once it has authenticated (e.g. its key)."""

    @property
    def name(self) -> str:
        """The peer in log lines."""
        return self.label if self.label is not None else self.peer

    @property
    def fault_peer(self) -> str:
        """The peer in the fault log: its label, else its address without the port, so a host
        reconnecting in a loop is one peer there and cannot flood the log."""
        return self.label if self.label is not None else self.host

    def abort(self) -> None:
        self.writer.transport.abort()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


ConnT = TypeVar("ConnT", bound=Connection)
IdentityT = TypeVar("IdentityT")


class TcpService(Generic[ConnT, IdentityT]):
    """Subclasses implement :meth:`connection`, :meth:`authenticate` and :meth:`session`."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        handshake_timeout: float,
        max_connections_per_address: int | None = None,
        max_handshakes: int | None = None,
        max_handshakes_per_address: int | None = None,
    ) -> None:
        self.handshake_timeout = handshake_timeout
        self.max_connections_per_address = max_connections_per_address
        self.max_handshakes = max_handshakes
        self.max_handshakes_per_address = max_handshakes_per_address
        self.stats: dict[str, int] = {"connections": 0}
        """Counters for the log and the status view; subclasses add their own keys."""
        self.faults = FaultLog(logger)
        """Protocol faults per kind; the first of each kind from each peer is logged."""
        self.closing = False
        self.log = logger
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._open: dict[str, int] = {}
        # Handshakes in progress per source address, oldest first (dicts keep insertion order).
        self._handshaking: dict[str, dict[ConnT, None]] = {}
        self._handshake_count = 0

    # --- what a protocol provides ---------------------------------------------------------------

    def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> ConnT:
        raise NotImplementedError

    async def authenticate(self, conn: ConnT) -> IdentityT | None:
        """Run the handshake; the peer's identity, or ``None`` to close without a session."""
        raise NotImplementedError

    async def session(self, conn: ConnT, identity: IdentityT) -> None:
        """Serve an authenticated peer until either side stops."""
        raise NotImplementedError

    def on_error(self, conn: ConnT, error: Exception) -> None:
        """``error`` ended the connection: a fault is recorded, a lost socket logged."""
        if isinstance(error, NetError):
            self.faults.record(conn.fault_peer, error.kind, str(error))
        elif isinstance(error, OSError):
            self.log.info("%s: connection lost: %s", conn.name, error or type(error).__name__)
        else:
            self.log.error("%s: internal error, connection closed", conn.name, exc_info=error)

    def disconnected(self, conn: ConnT) -> None:
        """Called once per connection, before its socket is closed."""

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self, host: str = "0.0.0.0", port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def serve_forever(self) -> None:
        assert self._server is not None, "server not started"
        await self._server.serve_forever()

    async def close(self) -> None:
        self.closing = True
        if self._server is not None:
            self._server.close()
        # Python 3.11's Server.close() leaves accepted connections open: end them ourselves.
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    # --- one connection -------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.stats["connections"] += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn = self.connection(reader, writer)
        already_open = self._open.get(conn.host, 0)
        self._open[conn.host] = already_open + 1
        try:
            limit = self.max_connections_per_address
            if limit is not None and already_open >= limit:
                self.faults.record(
                    conn.fault_peer, "too_many_connections", f"more than {limit} open"
                )
                return
            self._admit_handshake(conn)
            try:
                async with asyncio.timeout(self.handshake_timeout):
                    identity = await self.authenticate(conn)
            except TimeoutError:
                raise HandshakeTimeout(
                    f"handshake not finished within {self.handshake_timeout:g} s"
                ) from None
            finally:
                self._end_handshake(conn)
            if identity is not None:
                await self.session(conn, identity)
        except asyncio.CancelledError:
            pass  # shutdown; letting it escape makes asyncio log a spurious error
        except Exception as e:
            self.on_error(conn, e)
        finally:
            self._tasks.discard(task)
            left = self._open.pop(conn.host) - 1
            if left:
                self._open[conn.host] = left
            self.disconnected(conn)
            if self.closing:
                conn.abort()  # do not wait for slow readers while shutting down
            await conn.close()

    def _admit_handshake(self, conn: ConnT) -> None:
        """Count ``conn`` as handshaking, first evicting one handshake if a budget is full."""
        own = self._handshaking.get(conn.host, {})
        victims: dict[ConnT, None] | None = None
        per_address, total = self.max_handshakes_per_address, self.max_handshakes
        if per_address is not None and len(own) >= per_address:
            victims = own
        elif total is not None and self._handshake_count >= total:
            victims = max(self._handshaking.values(), key=len)
        if victims:
            old = next(iter(victims))
            self._end_handshake(old)
            self.stats["evicted"] = self.stats.get("evicted", 0) + 1
            self.log.debug("%s: handshake evicted for a newer connection", old.peer)
            old.abort()
        # Fetched again: the eviction may have dropped this address's (emptied) entry.
        self._handshaking.setdefault(conn.host, {})[conn] = None
        self._handshake_count += 1

    def _end_handshake(self, conn: ConnT) -> None:
        own = self._handshaking.get(conn.host)
        if own is None or own.pop(conn, False) is False:
            return
        self._handshake_count -= 1
        if not own:
            del self._handshaking[conn.host]
