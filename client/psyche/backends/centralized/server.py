"""The centralized server's network layer: asyncio TCP, authentication, ticking, broadcasting.

Each connection goes through the handshake of :mod:`~psyche.backends.centralized.protocol`
(challenge, ed25519 response, ``Join``); its identity is then
``NodeIdentity.from_single_key(public key)``, so its P2P key is the key it just proved it holds
by signing the fresh nonce: no wallet can join with another's P2P key (issue 12, finding 4), and
the hub's P2P key rule (:meth:`Coordinator.claim_p2p_key`) is a second line. Everything after
that is one call into the :class:`~psyche.backends.centralized.hub.Hub` per event, and a
broadcast of the new state to every joined connection when the call reports a change. A tick
runs every 500 ms with the wall clock (whole seconds) and a fresh 64-bit random seed.

Robustness rules, because any host can connect:

* The handshake must finish within ``handshake_timeout``; frames above 64 KiB are refused before
  their payload is read; every message is strictly decoded.
* After the join a connection must start a frame at least every ``idle_timeout`` (60 s; clients
  send ``Keepalive`` every 10 s) and finish each frame within ``frame_timeout`` (10 s) of its
  first byte, so a dead connection or a peer trickling bytes cannot hold its place for ever;
  closing it withdraws only that client. Before, a sender of one byte a second stayed joined.
* A frame that breaks the protocol (garbage, oversize, undecodable, out of order, too slow) or a
  failed handshake closes *that* connection after an ``Error{reason}`` (best effort). Faults are
  counted per kind in :attr:`CentralizedServer.faults` (the status view shows them) and the
  first of each kind from each peer is logged (a peer is its key once it has signed the
  challenge, its address before), so garbage in a loop costs one log line, not one per frame or
  connection;
  a message the coordinator rejects (e.g. a witness from a non-witness) is answered with
  ``Error{reason}`` and the connection stays open. Nobody else is affected either way.
* Writes go through one queue per connection, drained by its own task, so a slow reader never
  blocks the tick or other clients; a connection whose backlog exceeds ``max_backlog`` frames or
  whose writes stall for ``send_timeout`` is dropped (it reconnects and gets the latest state).
* A second connection with the same key replaces the first (a client reconnecting before the
  server noticed the old socket died); the replaced one closes without a disconnect/withdraw.

A slow or abusive peer must cost only itself:

* Peer-list (``Peers``) broadcasts are coalesced: a change marks the list dirty and one task sends
  the latest list at most every ``peers_interval``. Each connection holds at most one unsent peer
  list (a newer one replaces it), so peer-list churn can never fill anyone's backlog; before this,
  one key sending ~70 ``P2PAddrs`` frames made the server queue ~70 lists on every connection and
  drop (and withdraw) every client.
* ``P2PAddrs`` is rate limited per connection (token bucket: ``p2p_addrs_burst`` frames, refilled
  at ``p2p_addrs_per_second``); a connection above it is closed as a protocol violation.
* The read loop yields to the event loop after every frame, so frames already buffered from one
  socket cannot starve the send tasks and the tick.
* Unauthenticated connections and joined clients have separate budgets, so idle sockets cannot
  lock real clients out: at most ``max_handshakes`` handshakes in progress, at most
  ``max_handshakes_per_address`` of them per source address. A new connection over either bound
  evicts the oldest handshake of its own address, or else of the address holding the most, so a
  flood mostly evicts itself while an honest handshake (one round trip) gets through. Joined
  clients are capped by ``max_connections``, checked only after authentication.
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
    KeepaliveMsg,
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
from psyche.coordinator.types import CoordinatorException, P2PIdentityTakenError
from psyche.protocol.identity import NodeIdentity, verify_signature
from psyche.protocol.untrusted import FaultLog

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
    """Joined (authenticated) clients beyond this are refused; a reconnecting key does not count
    twice. Handshakes in progress do not count here, so unauthenticated sockets cannot use it up."""
    max_handshakes: int = 256
    """Connections still in the handshake, all addresses together. Bounds the sockets and memory
    strangers can hold for ``handshake_timeout``; an honest handshake needs only one round trip, so
    evicting the oldest one when full costs honest clients at most a retry."""
    max_handshakes_per_address: int = 8
    """Connections still in the handshake from one source IP address. An honest host runs one
    client (a few behind a NAT), so 8 leaves room while one address can hold only 8 of
    ``max_handshakes``."""
    peers_interval: float = 0.25
    """Seconds between two peer-list broadcasts; changes in between are sent together."""
    p2p_addrs_burst: int = 8
    """``P2PAddrs`` frames a connection may send at once (honest clients send one per connection
    and one per change of their listen addresses)."""
    p2p_addrs_per_second: float = 1.0
    """Rate at which that allowance refills; a connection sending faster is closed."""
    idle_timeout: float = 60.0
    """A joined connection that starts no frame for this long is closed (and the client
    withdrawn). Clients send ``Keepalive`` every 10 s, so this is six missed keepalives."""
    frame_timeout: float = 10.0
    """Seconds from a frame's first byte to its last. Client frames are at most 64 KiB (a health
    check is ≈ 25 KB), so this allows links down to ~7 KB/s while a peer trickling bytes to hold
    its connection is cut off."""


class _Refused(Exception):
    """The handshake failed; the message goes to the log and to the peer.

    ``kind`` is set when the refusal is a protocol fault (counted, and logged once per peer and
    kind, see :class:`~psyche.protocol.untrusted.FaultLog`) rather than the server being full.
    """

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


# Queued in place of a peer list: the sender takes the latest list from ``_Connection._peers``
# when it reaches this item (real frames are never empty: they start with a 4-byte length).
_PEERS_SLOT = b""


class _Connection:
    def __init__(self, writer: asyncio.StreamWriter, options: ServerOptions) -> None:
        self.writer = writer
        host, port = (writer.get_extra_info("peername") or ("?", "?"))[:2]
        self.host = str(host)
        self.peer = f"{host}:{port}"
        self.identity: NodeIdentity | None = None
        self._options = options
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._peers: bytes | None = None
        self._p2p_tokens = float(options.p2p_addrs_burst)
        self._p2p_at = time.monotonic()
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

    def send_peers(self, data: bytes) -> None:
        """Queue a peer list; one still waiting in the queue is replaced, not added to."""
        waiting = self._peers is not None
        self._peers = data
        if not waiting:
            self.send(_PEERS_SLOT)

    def take_p2p_token(self) -> bool:
        """Whether one more ``P2PAddrs`` frame is within this connection's rate limit."""
        now = time.monotonic()
        rate, burst = self._options.p2p_addrs_per_second, self._options.p2p_addrs_burst
        self._p2p_tokens = min(float(burst), self._p2p_tokens + (now - self._p2p_at) * rate)
        self._p2p_at = now
        if self._p2p_tokens < 1.0:
            return False
        self._p2p_tokens -= 1.0
        return True

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
                if data == _PEERS_SLOT:
                    data, self._peers = self._peers, None
                    if data is None:
                        continue
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
        self.stats = {
            "connections": 0,
            "refused": 0,
            "evicted": 0,
            "protocol_errors": 0,
            "rejected": 0,
        }
        self.faults = FaultLog(log)
        """Protocol faults per kind (shown by the status view); the first of each kind from each
        peer is logged, the rest only counted."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Handshakes in progress per source address, oldest first (dicts keep insertion order).
        self._handshaking: dict[str, dict[_Connection, None]] = {}
        self._handshake_count = 0
        self._peers_dirty = False
        self._peers_sent_at = -float("inf")
        self._peers_task: asyncio.Task[None] | None = None
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
        if self._peers_task is not None:
            self._peers_task.cancel()
        # Python 3.11's Server.close() leaves accepted connections open: end them ourselves.
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def publish_peers(self) -> None:
        """Send every connected client's P2P addresses to every connection, soon.

        Coalesced: calls within ``peers_interval`` of the last broadcast lead to one broadcast of
        the latest list, so the cost of address churn does not grow with its rate.
        """
        self._peers_dirty = True
        if self._peers_task is None or self._peers_task.done():
            self._peers_task = asyncio.get_running_loop().create_task(self._broadcast_peers())

    async def _broadcast_peers(self) -> None:
        while self._peers_dirty and not self._closing:
            # Sleep even when due, so that changes made in this loop iteration go out together.
            due = self._peers_sent_at + self.options.peers_interval
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            self._peers_dirty = False
            self._peers_sent_at = time.monotonic()
            data = self._peers_frame()
            for conn in list(self.connections.values()):
                conn.send_peers(data)

    def _peers_frame(self) -> bytes:
        entries = [PeerEntry(who.p2p_identity, addrs) for who, addrs in self.p2p_addrs.items()]
        return frame(PeersMsg(entries), MAX_SERVER_FRAME)

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
        self.stats["connections"] += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn = _Connection(writer, self.options)
        self._admit_handshake(conn)
        try:
            who = await asyncio.wait_for(
                self._handshake(reader, conn), self.options.handshake_timeout
            )
            self._end_handshake(conn)
            if who is None:
                return
            limit = self.options.max_connections
            if who not in self.connections and len(self.connections) >= limit:
                raise _Refused(f"too many clients ({limit})")
            if not self._register(conn, who):
                return
            while (
                data := await read_message(
                    reader,
                    MAX_CLIENT_FRAME,
                    idle_timeout=self.options.idle_timeout,
                    frame_timeout=self.options.frame_timeout,
                )
            ) is not None:
                self._dispatch(conn, who, decode_client(data))
                # A socket's buffered frames are read without awaiting anything: yield, so the
                # send tasks and the tick run between this peer's frames.
                await asyncio.sleep(0)
        except _Refused as e:
            self.stats["refused"] += 1
            if e.kind is None:
                log.warning("%s refused: %s", conn.name, e)
            else:
                self.faults.record(self._fault_peer(conn), e.kind, f"refused: {e}")
            conn.send(frame(ErrorMsg(str(e)), MAX_SERVER_FRAME))
        except ProtocolError as e:
            self.stats["protocol_errors"] += 1
            self.faults.record(self._fault_peer(conn), e.kind, f"dropped: {e}")
            conn.send(frame(ErrorMsg(f"protocol violation: {e}"[:1000]), MAX_SERVER_FRAME))
        except TimeoutError:
            self.faults.record(
                self._fault_peer(conn), "handshake_timeout", "dropped: handshake not finished"
            )
        except OSError as e:
            log.info("%s: connection lost: %s", conn.name, e or type(e).__name__)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: internal error, connection closed", conn.name)
        finally:
            self._end_handshake(conn)
            self._tasks.discard(task)
            self._unregister(conn)
            if self._closing:
                conn.abort()  # do not wait for slow readers while shutting down
            await conn.close()

    @staticmethod
    def _fault_peer(conn: _Connection) -> str:
        # A joined client is its key (clients behind one address are told apart); before the
        # handshake there is only the address, and keying on it bounds what a host reconnecting
        # in a loop can write to the log.
        return conn.identity.hex() if conn.identity is not None else conn.host

    def _admit_handshake(self, conn: _Connection) -> None:
        """Count ``conn`` as handshaking, first evicting one handshake if a budget is full."""
        own = self._handshaking.get(conn.host, {})
        victims: dict[_Connection, None] | None = None
        if len(own) >= self.options.max_handshakes_per_address:
            victims = own
        elif self._handshake_count >= self.options.max_handshakes:
            victims = max(self._handshaking.values(), key=len)
        if victims:
            old = next(iter(victims))
            self._end_handshake(old)
            self.stats["evicted"] += 1
            log.debug("%s: handshake evicted for a newer connection", old.peer)
            old.abort()
        # Fetched again: the eviction may have dropped this address's (emptied) entry.
        self._handshaking.setdefault(conn.host, {})[conn] = None
        self._handshake_count += 1

    def _end_handshake(self, conn: _Connection) -> None:
        own = self._handshaking.get(conn.host)
        if own is None or own.pop(conn, False) is False:
            return
        self._handshake_count -= 1
        if not own:
            del self._handshaking[conn.host]

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
            raise ProtocolError(
                f"expected ChallengeResponse, got {type(answer).__name__}", "unexpected"
            )
        if not verify_signature(answer.public_key, auth_message(nonce), answer.signature):
            raise _Refused("bad challenge signature", "bad_signature")
        who = NodeIdentity.from_single_key(answer.public_key)
        conn.identity = who
        data = await read_message(reader, MAX_CLIENT_FRAME)
        if data is None:
            return None
        join = decode_client(data)
        if not isinstance(join, Join):
            raise ProtocolError(f"expected Join, got {type(join).__name__}", "unexpected")
        if join.run_id != self.run_id:
            reason = f"run id {join.run_id!r} does not match this server's run {self.run_id!r}"
            log.warning("%s: join refused: %s", conn.name, reason)
            conn.send(frame(JoinRejected(reason), MAX_SERVER_FRAME))
            return None
        return who

    def _register(self, conn: _Connection, who: NodeIdentity) -> bool:
        """Join ``who`` on ``conn``; False (after a ``JoinRejected``) if the hub refused it."""
        try:
            self.hub.join(who)
        except P2PIdentityTakenError as e:
            # Refused before anything changed: the key's holder keeps its connection and place.
            # (Unreachable through this server today, whose identities are single keys proven
            # by the challenge; kept so that the hub's rule is enforced wherever it is used.)
            self.stats["refused"] += 1
            log.warning("%s: join refused: %s", conn.name, e)
            conn.send(frame(JoinRejected(str(e)[:1000]), MAX_SERVER_FRAME))
            return False
        old = self.connections.get(who)
        self.connections[who] = conn
        if old is not None:
            log.info("%s reconnected; closing its previous connection %s", who.hex(), old.peer)
            old.abort()
        seq, state = self.hub.snapshot()
        conn.send(frame(StateMsg(seq, state), MAX_SERVER_FRAME))
        if self.p2p_addrs:
            conn.send_peers(self._peers_frame())
        log.debug("%s joined from %s (%d connected)", who.hex(), conn.peer, len(self.connections))
        return True

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
            elif isinstance(msg, KeepaliveMsg):
                return
            elif isinstance(msg, P2PAddrsMsg):
                if not conn.take_p2p_token():
                    raise ProtocolError("P2PAddrs sent faster than the rate limit", "rate_limited")
                addrs = list(msg.addrs)
                if self.p2p_addrs.get(who) != addrs:
                    self.p2p_addrs[who] = addrs
                    self.publish_peers()
                return
            else:
                raise ProtocolError(
                    f"unexpected {type(msg).__name__} after the handshake", "unexpected"
                )
        except CoordinatorException as e:
            self.stats["rejected"] += 1
            kind = type(msg).__name__.removesuffix("Msg")
            self.hub.note(f"{kind} from {who.hex()} rejected: {e}", logging.WARNING)
            conn.send(frame(ErrorMsg(f"{e}"[:1000]), MAX_SERVER_FRAME))
            return
        if changed:
            self.publish()
