"""The centralized server's network layer: authentication, ticking, broadcasting.

It is a :class:`psyche.net.service.TcpService` (connection tracking, handshake budgets and time
limit, fault log, shutdown). Each connection goes through the handshake of
:mod:`~psyche.backends.centralized.protocol` (challenge, ed25519 response, ``Join``); its
identity is then
``NodeIdentity.from_single_key(public key)``, so its P2P key is the key it just proved it holds
by signing the fresh nonce: no wallet can join with another's P2P key (issue 12, finding 4), and
the hub's P2P key rule (:meth:`Coordinator.claim_p2p_key`) is a second line. Everything after
that is one call into the :class:`~psyche.backends.centralized.run_host.RunHost` per event, and a
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
* Writes go through one queue per connection
  (:class:`~psyche.backends.centralized.connection.ClientConnection`), so a slow reader never
  blocks the tick or other clients; one more than ``max_backlog`` frames behind or stalled for
  ``send_timeout`` is dropped (it reconnects and gets the latest state).
* A second connection with the same key replaces the first (a client reconnecting before the
  server noticed the old socket died); the replaced one closes without a disconnect/withdraw.

A slow or abusive peer must cost only itself:

* Peer-list (``Peers``) broadcasts are coalesced: a change marks the list dirty and one task sends
  the latest list at most every ``peers_interval``. Each connection holds at most one unsent peer
  list, so peer-list churn can never fill anyone's backlog; before this,
  one key sending ~70 ``P2PAddrs`` frames made the server queue ~70 lists on every connection and
  drop (and withdraw) every client.
* ``P2PAddrs`` is rate limited per connection (token bucket: ``p2p_addrs_burst`` frames, refilled
  at ``p2p_addrs_per_second``); a connection above it is closed as a protocol violation.
* The read loop yields to the event loop after every frame, so frames already buffered from one
  socket cannot starve the send tasks and the tick.
* Unauthenticated connections and joined clients have separate budgets, so idle sockets cannot
  lock real clients out: at most ``max_handshakes`` handshakes in progress, at most
  ``max_handshakes_per_address`` of them per source address (the oldest is evicted, see
  :mod:`psyche.net.service`). Joined clients are capped by ``max_connections``, checked only
  after authentication.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from psyche.backends.centralized.connection import ClientConnection
from psyche.backends.centralized.protocol import (
    AUTH,
    MAX_CLIENT_FRAME,
    MAX_SERVER_FRAME,
    PROTOCOL_VERSION,
    Challenge,
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
    decode_client,
    frame,
    read_message,
)
from psyche.backends.centralized.run_host import RunHost
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import (
    CoordinatorException,
    P2PIdentityTakenError,
    WitnessMetadata,
)
from psyche.net.errors import BadSignature, HandshakeTimeout, NetError
from psyche.net.handshake import challenge_peer
from psyche.net.service import TcpService
from psyche.protocol.identity import NodeIdentity

__all__ = ["CentralizedServer", "ServerOptions"]

log = logging.getLogger(__name__)

TICK_SLACK_S = 0.005
"""How long after a multiple of the tick interval a tick runs, so that the whole second it
aligns to has begun on the clock the coordinator reads."""


def next_tick_at(now: float, interval: float) -> float:
    """The wall-clock time of the next tick after ``now``: just after the next multiple of
    ``interval`` (see :meth:`CentralizedServer.serve_forever`)."""
    return (math.floor(now / interval) + 1) * interval + TICK_SLACK_S


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    host: str = "0.0.0.0"
    """Address to listen on."""
    port: int = 20000
    """TCP port (0: any free port, see :attr:`CentralizedServer.port`)."""
    tick_interval: float = 0.5
    """Seconds between ticks (the reference's 500 ms), aligned to the wall clock's multiples of
    it (a divisor of one second keeps ticks on the second boundaries, where timeouts expire)."""
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
    kind, see :class:`~psyche.net.faults.FaultLog`) rather than the server being full.
    """

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


class CentralizedServer(TcpService[ClientConnection, NodeIdentity]):
    """Serves one :class:`RunHost` on TCP; :meth:`start`, then :meth:`serve_forever`."""

    def __init__(
        self,
        hub: RunHost,
        options: ServerOptions | None = None,
        *,
        on_state: Callable[[Coordinator], None] | None = None,
    ) -> None:
        self.options = options = options or ServerOptions()
        super().__init__(
            log,
            handshake_timeout=options.handshake_timeout,
            max_handshakes=options.max_handshakes,
            max_handshakes_per_address=options.max_handshakes_per_address,
        )
        self.hub = hub
        self.run_id = hub.coordinator.run_id
        self.on_state = on_state
        self.connections: dict[NodeIdentity, ClientConnection] = {}
        self.p2p_addrs: dict[NodeIdentity, list[str]] = {}
        """P2P listen addresses the connected clients published (relayed, never interpreted)."""
        self.stats.update(refused=0, evicted=0, protocol_errors=0, rejected=0)
        self._peers_dirty = False
        self._peers_sent_at = -float("inf")
        self._peers_task: asyncio.Task[None] | None = None
        self.on_witness: Callable[[NodeIdentity, WitnessMetadata], None] | None = None
        """Called with each accepted witness's metadata (the status endpoint keeps the last
        ones; the coordinator never stores them)."""

    async def start(self, host: str | None = None, port: int | None = None) -> None:
        """Listen on ``options.host`` and ``options.port`` unless told otherwise."""
        await super().start(
            self.options.host if host is None else host,
            self.options.port if port is None else port,
        )
        if self.on_state is not None:
            self.on_state(self.hub.coordinator)

    async def serve_forever(self) -> None:
        """Tick until cancelled, just after every multiple of ``tick_interval`` on the wall
        clock. The coordinator's clock is whole seconds, so every timeout (a RoundWitness's end,
        above all) expires at a second boundary: a tick aligned to it ends the phase then, where
        a free-running tick came up to one interval (on average half of one) later."""
        interval = self.options.tick_interval
        while True:
            now = time.time()
            # Computed afresh from the clock each time: no catch-up bursts after a stall.
            await asyncio.sleep(next_tick_at(now, interval) - now)
            try:
                changed = self.hub.tick(int(time.time()), secrets.randbits(64))
            except CoordinatorException as e:
                log.warning("tick rejected: %s", e)
                continue
            if changed:
                self.publish()

    async def close(self) -> None:
        # Shutting down is not the clients leaving: keep the state as it is.
        self.closing = True
        if self._peers_task is not None:
            self._peers_task.cancel()
        await super().close()

    def publish_peers(self) -> None:
        """Send every connected client's P2P addresses to every connection, soon.

        Coalesced: calls within ``peers_interval`` of the last broadcast lead to one broadcast of
        the latest list, so the cost of address churn does not grow with its rate.
        """
        self._peers_dirty = True
        if self._peers_task is None or self._peers_task.done():
            self._peers_task = asyncio.get_running_loop().create_task(self._broadcast_peers())

    async def _broadcast_peers(self) -> None:
        while self._peers_dirty and not self.closing:
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

    def connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> ClientConnection:
        o = self.options
        return ClientConnection(
            reader,
            writer,
            send_timeout=o.send_timeout,
            max_backlog=o.max_backlog,
            p2p_addrs_burst=o.p2p_addrs_burst,
            p2p_addrs_per_second=o.p2p_addrs_per_second,
        )

    async def authenticate(self, conn: ClientConnection) -> NodeIdentity | None:
        async def send_challenge(nonce: bytes) -> None:
            conn.send(frame(Challenge(PROTOCOL_VERSION, nonce), MAX_SERVER_FRAME))

        key = await challenge_peer(
            AUTH, conn.reader, send_challenge, decode_client, MAX_CLIENT_FRAME
        )
        if key is None:
            return None
        who = NodeIdentity.from_single_key(key)
        conn.authenticated(who)
        data = await read_message(conn.reader, MAX_CLIENT_FRAME)
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

    async def session(self, conn: ClientConnection, who: NodeIdentity) -> None:
        limit = self.options.max_connections
        if who not in self.connections and len(self.connections) >= limit:
            raise _Refused(f"too many clients ({limit})")
        if not self._register(conn, who):
            return
        while (
            data := await read_message(
                conn.reader,
                MAX_CLIENT_FRAME,
                idle_timeout=self.options.idle_timeout,
                frame_timeout=self.options.frame_timeout,
            )
        ) is not None:
            self._dispatch(conn, who, decode_client(data))
            # A socket's buffered frames are read without awaiting anything: yield, so the
            # send tasks and the tick run between this peer's frames.
            await asyncio.sleep(0)

    def on_error(self, conn: ClientConnection, error: Exception) -> None:
        if isinstance(error, BadSignature):
            error = _Refused(str(error), error.kind)
        if isinstance(error, _Refused):
            self.stats["refused"] += 1
            if error.kind is None:
                log.warning("%s refused: %s", conn.name, error)
            else:
                self.faults.record(conn.fault_peer, error.kind, f"refused: {error}")
            conn.send(frame(ErrorMsg(str(error)), MAX_SERVER_FRAME))
        elif isinstance(error, HandshakeTimeout):
            self.faults.record(conn.fault_peer, error.kind, f"dropped: {error}")
        elif isinstance(error, ProtocolError | NetError):
            self.stats["protocol_errors"] += 1
            self.faults.record(conn.fault_peer, error.kind, f"dropped: {error}")
            conn.send(frame(ErrorMsg(f"protocol violation: {error}"[:1000]), MAX_SERVER_FRAME))
        else:
            super().on_error(conn, error)

    def disconnected(self, conn: ClientConnection) -> None:
        self._unregister(conn)

    def _register(self, conn: ClientConnection, who: NodeIdentity) -> bool:
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

    def _unregister(self, conn: ClientConnection) -> None:
        who = conn.identity
        if who is None or self.connections.get(who) is not conn:
            return
        del self.connections[who]
        if self.p2p_addrs.pop(who, None) is not None and not self.closing:
            self.publish_peers()
        log.debug("%s disconnected (%d connected)", who.hex(), len(self.connections))
        if not self.closing and self.hub.disconnect(who):
            self.publish()

    def _dispatch(self, conn: ClientConnection, who: NodeIdentity, msg: ClientMessage) -> None:
        now = int(time.time())
        try:
            if isinstance(msg, WitnessMsg):
                witness, metadata = msg.to_witness()
                changed = self.hub.witness(who, witness, metadata, now)
                if self.on_witness is not None:
                    self.on_witness(who, metadata)
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
