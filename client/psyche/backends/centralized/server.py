"""The centralized server's network layer: asyncio TCP, authentication, ticking, broadcasting.

Each connection goes through the handshake of :mod:`~psyche.backends.centralized.protocol`
(challenge, ed25519 response, ``Join``); its identity is then
``NodeIdentity.from_single_key(public key)``. Everything after that is one call into the
:class:`~psyche.backends.centralized.hub.Hub` per event, and a broadcast of the new state to every
joined connection when the call reports a change. A tick runs every 500 ms with the wall clock
(whole seconds) and a fresh 64-bit random seed.

Robustness rules, because any host can connect:

* The handshake must finish within ``handshake_timeout``; frames above 64 KiB are refused before
  their payload is read; every message is strictly decoded.
* A frame that breaks the protocol (garbage, oversize, undecodable, out of order) or a failed
  handshake closes *that* connection after an ``Error{reason}`` (best effort) and a log line;
  a message the coordinator rejects (e.g. a witness from a non-witness) is answered with
  ``Error{reason}`` and the connection stays open. Nobody else is affected either way.
* Writes go through one queue per connection, drained by its own task, so a slow reader never
  blocks the tick or other clients; a connection whose backlog exceeds ``max_backlog`` frames or
  whose writes stall for ``send_timeout`` is dropped (it reconnects and gets the latest state).
* A second connection with the same key replaces the first (a client reconnecting before the
  server noticed the old socket died); the replaced one closes without a disconnect/withdraw.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from psyche.backends.centralized.hub import Hub
from psyche.backends.centralized.protocol import (
    MAX_CLIENT_FRAME,
    MAX_SERVER_FRAME,
    PROTOCOL_VERSION,
    Challenge,
    ChallengeResponse,
    CheckpointMsg,
    ClientMessage,
    ErrorMsg,
    HealthCheckMsg,
    Join,
    JoinRejected,
    P2PAddrsMsg,
    PeerEntry,
    PeersMsg,
    ProtocolError,
    StateMsg,
    WarmupWitnessMsg,
    WitnessMsg,
    auth_message,
    decode_client,
    frame,
    read_message,
)
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import CoordinatorException
from psyche.protocol.identity import NodeIdentity, verify_signature

__all__ = ["CentralizedServer", "ServerOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    host: str = "0.0.0.0"
    """Address to listen on."""
    port: int = 20000
    """TCP port (0: any free port, see :attr:`CentralizedServer.port`)."""
    tick_interval: float = 0.5
    """Seconds between ticks (the reference's 500 ms)."""
    handshake_timeout: float = 10.0
    send_timeout: float = 30.0
    """A client whose socket accepts nothing for this long is dropped."""
    max_backlog: int = 64
    """Frames queued for one client before it counts as too slow and is dropped."""
    max_connections: int = 1024
    """Open connections (joined or still in the handshake) beyond this are refused."""


class _Refused(Exception):
    """The handshake failed; the message goes to the log and to the peer."""


class _Connection:
    def __init__(self, writer: asyncio.StreamWriter, options: ServerOptions) -> None:
        self.writer = writer
        host, port = (writer.get_extra_info("peername") or ("?", "?"))[:2]
        self.peer = f"{host}:{port}"
        self.identity: NodeIdentity | None = None
        self._options = options
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._sender = asyncio.create_task(self._send_loop())

    @property
    def name(self) -> str:
        return self.identity.hex() if self.identity is not None else self.peer

    def send(self, data: bytes) -> None:
        if self._queue.qsize() >= self._options.max_backlog:
            log.warning("%s: %d frames behind, dropping it", self.name, self._queue.qsize())
            self.abort()
            return
        self._queue.put_nowait(data)

    def abort(self) -> None:
        self.writer.transport.abort()

    async def close(self) -> None:
        """Flush what is queued (bounded by ``send_timeout``), then close."""
        self._queue.put_nowait(None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._sender), self._options.send_timeout)
        self._sender.cancel()
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()

    async def _send_loop(self) -> None:
        try:
            while (data := await self._queue.get()) is not None:
                self.writer.write(data)
                await asyncio.wait_for(self.writer.drain(), self._options.send_timeout)
        except (OSError, TimeoutError) as e:
            log.info("%s: send failed (%s), dropping it", self.name, e or type(e).__name__)
            self.abort()


class CentralizedServer:
    """Serves one :class:`Hub` on TCP; :meth:`start`, then :meth:`serve_forever`."""

    def __init__(
        self,
        hub: Hub,
        options: ServerOptions | None = None,
        *,
        on_state: Callable[[Coordinator], None] | None = None,
    ) -> None:
        self.hub = hub
        self.options = options or ServerOptions()
        self.run_id = hub.coordinator.run_id
        self.on_state = on_state
        self.connections: dict[NodeIdentity, _Connection] = {}
        self.p2p_addrs: dict[NodeIdentity, list[str]] = {}
        """P2P listen addresses the connected clients published (relayed, never interpreted)."""
        self.stats = {"connections": 0, "refused": 0, "protocol_errors": 0, "rejected": 0}
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._open = 0
        self._closing = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self.options.host, self.options.port
        )
        if self.on_state is not None:
            self.on_state(self.hub.coordinator)

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def serve_forever(self) -> None:
        """Tick until cancelled."""
        interval = self.options.tick_interval
        next_at = time.monotonic()
        while True:
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - interval)  # no catch-up bursts after a stall
            try:
                changed = self.hub.tick(int(time.time()), secrets.randbits(64))
            except CoordinatorException as e:
                log.warning("tick rejected: %s", e)
                continue
            if changed:
                self.publish()

    async def close(self) -> None:
        # Shutting down is not the clients leaving: keep the state as it is.
        self._closing = True
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

    def publish_peers(self) -> None:
        """Send every connected client's P2P addresses to every connection."""
        entries = [PeerEntry(who.p2p_identity, addrs) for who, addrs in self.p2p_addrs.items()]
        data = frame(PeersMsg(entries), MAX_SERVER_FRAME)
        for conn in list(self.connections.values()):
            conn.send(data)

    def publish(self) -> None:
        """Send the hub's current state to every joined connection."""
        seq, state = self.hub.snapshot()
        data = frame(StateMsg(seq, state), MAX_SERVER_FRAME)
        for conn in list(self.connections.values()):
            conn.send(data)
        if self.on_state is not None:
            try:
                self.on_state(self.hub.coordinator)
            except Exception:
                log.exception("state listener failed")

    # --- one connection -------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._open += 1
        self.stats["connections"] += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn = _Connection(writer, self.options)
        try:
            if self._open > self.options.max_connections:
                raise _Refused(f"too many connections ({self.options.max_connections})")
            who = await asyncio.wait_for(
                self._handshake(reader, conn), self.options.handshake_timeout
            )
            if who is None:
                return
            self._register(conn, who)
            while (data := await read_message(reader, MAX_CLIENT_FRAME)) is not None:
                self._dispatch(conn, who, decode_client(data))
        except _Refused as e:
            self.stats["refused"] += 1
            log.warning("%s refused: %s", conn.name, e)
            conn.send(frame(ErrorMsg(str(e)), MAX_SERVER_FRAME))
        except ProtocolError as e:
            self.stats["protocol_errors"] += 1
            log.warning("%s dropped: %s", conn.name, e)
            conn.send(frame(ErrorMsg(f"protocol violation: {e}"[:1000]), MAX_SERVER_FRAME))
        except TimeoutError:
            log.warning("%s dropped: handshake not finished in time", conn.name)
        except OSError as e:
            log.info("%s: connection lost: %s", conn.name, e or type(e).__name__)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: internal error, connection closed", conn.name)
        finally:
            self._open -= 1
            self._tasks.discard(task)
            self._unregister(conn)
            if self._closing:
                conn.abort()  # do not wait for slow readers while shutting down
            await conn.close()

    async def _handshake(
        self, reader: asyncio.StreamReader, conn: _Connection
    ) -> NodeIdentity | None:
        nonce = secrets.token_bytes(32)
        conn.send(frame(Challenge(PROTOCOL_VERSION, nonce), MAX_SERVER_FRAME))
        data = await read_message(reader, MAX_CLIENT_FRAME)
        if data is None:
            return None
        answer = decode_client(data)
        if not isinstance(answer, ChallengeResponse):
            raise ProtocolError(f"expected ChallengeResponse, got {type(answer).__name__}")
        if not verify_signature(answer.public_key, auth_message(nonce), answer.signature):
            raise _Refused("bad challenge signature")
        who = NodeIdentity.from_single_key(answer.public_key)
        conn.identity = who
        data = await read_message(reader, MAX_CLIENT_FRAME)
        if data is None:
            return None
        join = decode_client(data)
        if not isinstance(join, Join):
            raise ProtocolError(f"expected Join, got {type(join).__name__}")
        if join.run_id != self.run_id:
            reason = f"run id {join.run_id!r} does not match this server's run {self.run_id!r}"
            log.warning("%s: join refused: %s", conn.name, reason)
            conn.send(frame(JoinRejected(reason), MAX_SERVER_FRAME))
            return None
        return who

    def _register(self, conn: _Connection, who: NodeIdentity) -> None:
        old = self.connections.get(who)
        self.connections[who] = conn
        if old is not None:
            log.info("%s reconnected; closing its previous connection %s", who.hex(), old.peer)
            old.abort()
        self.hub.join(who)
        seq, state = self.hub.snapshot()
        conn.send(frame(StateMsg(seq, state), MAX_SERVER_FRAME))
        if self.p2p_addrs:
            entries = [PeerEntry(w.p2p_identity, a) for w, a in self.p2p_addrs.items()]
            conn.send(frame(PeersMsg(entries), MAX_SERVER_FRAME))
        log.debug("%s joined from %s (%d connected)", who.hex(), conn.peer, len(self.connections))

    def _unregister(self, conn: _Connection) -> None:
        who = conn.identity
        if who is None or self.connections.get(who) is not conn:
            return
        del self.connections[who]
        if self.p2p_addrs.pop(who, None) is not None and not self._closing:
            self.publish_peers()
        log.debug("%s disconnected (%d connected)", who.hex(), len(self.connections))
        if not self._closing and self.hub.disconnect(who):
            self.publish()

    def _dispatch(self, conn: _Connection, who: NodeIdentity, msg: ClientMessage) -> None:
        now = int(time.time())
        try:
            if isinstance(msg, WitnessMsg):
                witness, metadata = msg.to_witness()
                changed = self.hub.witness(who, witness, metadata, now)
            elif isinstance(msg, WarmupWitnessMsg):
                changed = self.hub.warmup_witness(who, msg.to_witness(), now, secrets.randbits(64))
            elif isinstance(msg, HealthCheckMsg):
                changed = self.hub.health_check(who, msg.to_checks())
            elif isinstance(msg, CheckpointMsg):
                changed = self.hub.checkpoint(who, msg.index, msg.to_checkpoint(), now)
            elif isinstance(msg, P2PAddrsMsg):
                self.p2p_addrs[who] = list(msg.addrs)
                self.publish_peers()
                return
            else:
                raise ProtocolError(f"unexpected {type(msg).__name__} after the handshake")
        except CoordinatorException as e:
            self.stats["rejected"] += 1
            kind = type(msg).__name__.removesuffix("Msg")
            self.hub.note(f"{kind} from {who.hex()} rejected: {e}", logging.WARNING)
            conn.send(frame(ErrorMsg(f"{e}"[:1000]), MAX_SERVER_FRAME))
            return
        if changed:
            self.publish()
