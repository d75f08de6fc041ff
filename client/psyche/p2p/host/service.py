"""What the libp2p host process does, once its host and pubsub exist (trio).

:class:`HostService` holds the state that lives as long as the host process and runs its tasks:

* gossip: a pubsub topic validator admits only messages whose libp2p-verified originator is in
  the allow-list and whose data fits :data:`~psyche.p2p.messages.MAX_ANNOUNCEMENT` (rejected
  messages are not forwarded either; they are counted by kind and the first of each kind from
  each peer is logged, :mod:`psyche.p2p.rejections`); deliveries go to the parent through a
  bounded buffer whose overflow is counted and logged, never silent; publishes are queued so a
  slow publish cannot block the control loop;
* connections: dials with a deadline, and a redial loop for every peer the parent asked for,
  clearing py-libp2p's 60 s failed-dial cache first (py-libp2p never redials by itself); a
  peer's circuit addresses (``…/p2p/<relay>/p2p-circuit/p2p/<peer>``) are dialled through the
  relay once its direct addresses failed or had a second's head start (docs/p2p-nat.md);
* NAT traversal (:mod:`.relay`): a relay for members (bounded, :mod:`psyche.p2p.nat`),
  reservations on the relays the parent names, renewed at half their life and remade when the
  relay connection comes back, and DCUtR hole punching over relayed connections; where peers
  observe us, and so whether we are behind a NAT, goes out with the stats;
* blobs: serves registered files (:class:`~psyche.p2p.host.blobs.BlobServer`) and runs fetches
  (:func:`~psyche.p2p.host.fetch.fetch_blob`), each cancellable by the parent; a peer that served
  wrong bytes for a blob is remembered and not asked for that blob again;
* measurements: pings allowed peers every few seconds and reports per-peer latency, bandwidth and
  running counters to the parent about once a second.

:class:`ControlChannel` is the trio end of the control socket (:mod:`psyche.p2p.control`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import multiaddr
import trio
from libp2p.connection_types import ConnectionType
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service

from psyche.net.multiaddrs import interface_ips
from psyche.p2p.control import (
    Ack,
    CancelFetch,
    Connect,
    Delivery,
    Fetch,
    FetchDone,
    FetchErrorKind,
    FrameDecoder,
    HostMessage,
    Init,
    Publish,
    Reserve,
    Reserved,
    Serve,
    SetAllowedPeers,
    Shutdown,
    Unserve,
    decode_parent,
    encode_frame,
)
from psyche.p2p.host.blobs import BLOB_PROTOCOL, PING_PROTOCOL, BlobServer, ByteStream, ping
from psyche.p2p.host.fetch import FetchRequest, fetch_blob
from psyche.p2p.host.hole_punch import CountingDCUtR
from psyche.p2p.host.peers import HostCounters, NatReport, PeerTable, peer_stats
from psyche.p2p.host.relay import MemberRelay, dial_through, reserve_on
from psyche.p2p.messages import MAX_ANNOUNCEMENT, gossip_topic
from psyche.p2p.nat import (
    DEFAULT_RELAY_LIMITS,
    CircuitAddr,
    circuit_addr,
    ip_of,
    parse_circuit_addr,
    reachability,
    relay_of,
)
from psyche.p2p.rejections import Rejection, Rejections

__all__ = ["ControlChannel", "HostService", "RelayState"]

log = logging.getLogger("psyche.p2p.host")

REDIAL_INTERVAL = 3.0
DIAL_TIMEOUT = 5.0
RELAY_DIAL_TIMEOUT = 15.0
"""One dial through a relay: reaching the relay, its circuit to the peer, then Noise and Yamux
over two hops."""
CIRCUIT_HEAD_START = 1.0
"""How long a peer's direct addresses get before its circuit addresses are tried as well."""
RESERVE_TIMEOUT = 10.0
RESERVE_RETRY = 10.0
"""Pause before trying again a relay that refused or could not be reached."""
PING_INTERVAL = 3.0
STATS_INTERVAL = 1.0
DELIVERY_BUFFER = 4096
LIAR_MEMORY = 1024
"""Blobs for which the peers that served wrong bytes are remembered (oldest forgotten first)."""


def _is_relayed(conn: Any) -> bool:
    try:
        if conn.get_connection_type() == ConnectionType.RELAYED:
            return True
        return any("/p2p-circuit" in str(a) for a in conn.get_transport_addresses())
    except Exception:
        return False


class ControlChannel:
    """The trio end of the control socket: whole frames in, serialized frames out."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._decoder = FrameDecoder()
        self._pending: list[bytes] = []
        self._lock = trio.Lock()

    async def receive(self) -> bytes | None:
        while not self._pending:
            data = await self._stream.receive_some(1 << 16)
            if not data:
                return None
            self._pending.extend(self._decoder.feed(data))
        return self._pending.pop(0)

    async def send(self, msg: HostMessage) -> None:
        frame = encode_frame(msg)
        async with self._lock:
            await self._stream.send_all(frame)


@dataclass(slots=True)
class RelayState:
    """One relay the parent asked us to hold a reservation on."""

    addrs: list[str]
    """Its direct addresses as given (``…/p2p/<relay id>``); our circuit addresses extend them."""
    expires: float = 0.0
    """Unix time the reservation lapses; 0 while we hold none."""
    next_try: float = 0.0
    """Monotonic time of the next renewal (half the reservation's life) or retry."""
    error: str | None = None
    attempt: trio.Event | None = None
    """Set when the reservation attempt in flight ends (None: none in flight)."""


class HostService:
    """Everything that lives for the host process's lifetime, and its background tasks."""

    def __init__(self, control: ControlChannel, init: Init, host: Any, pubsub: Pubsub) -> None:
        self.control = control
        self.host = host
        self.pubsub = pubsub
        self.topic = gossip_topic(init.run_id)
        self.blob_dir = Path(init.blob_dir)
        self.me = host.get_id().to_base58()
        self.allowed: frozenset[str] = frozenset()
        self.known: dict[str, list[multiaddr.Multiaddr]] = {}
        """Direct addresses of every peer the parent asked for."""
        self.circuits: dict[str, list[CircuitAddr]] = {}
        """Circuit addresses of those peers (dialled through their relay)."""
        self.relays: dict[str, RelayState] = {}
        self.relayed_out = 0
        self._local_ips: set[str] | None = None
        self.table = PeerTable()
        self.counters = HostCounters()
        self.rejections = Rejections(log)
        self.liars: dict[bytes, set[str]] = {}
        """Per blob, the peers that served bytes not matching its hash (insertion ordered)."""
        self.server = BlobServer(is_allowed=self.is_allowed)
        self.fetches: dict[int, trio.CancelScope] = {}
        self.deliveries_in, self.deliveries_out = trio.open_memory_channel[Delivery](
            DELIVERY_BUFFER
        )
        self.publish_in, self.publish_out = trio.open_memory_channel[Publish](DELIVERY_BUFFER)
        self.relay = MemberRelay(host, DEFAULT_RELAY_LIMITS, self.is_allowed, self.rejections)
        self.dcutr = CountingDCUtR(host, self.is_allowed)

    def is_allowed(self, peer: str) -> bool:
        return peer in self.allowed

    def validate(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """Pubsub topic validator: runs for every message before delivery and forwarding."""
        origin = ID(msg.from_id).to_base58()
        if origin == self.me:
            return True
        if len(msg.data) > MAX_ANNOUNCEMENT:
            self.counters.dropped_oversize += 1
            self.rejections.record(Rejection.oversized_gossip, origin, f"{len(msg.data)} bytes")
            return False
        if origin not in self.allowed:
            self.counters.dropped_not_allowed += 1
            self.rejections.record(Rejection.non_member_gossip, origin)
            return False
        return True

    # ---- gossip ------------------------------------------------------------------------------

    async def read_gossip(self, subscription: Any) -> None:
        while True:
            msg = await subscription.get()
            origin = ID(msg.from_id).to_base58()
            if origin == self.me:
                # The daemon applies its own announcements directly (docs/protocol.md,
                # "Training and publishing").
                continue
            try:
                self.deliveries_in.send_nowait(Delivery(from_peer=origin, data=msg.data))
            except trio.WouldBlock:
                self.counters.dropped_overflow += 1
                log.warning("parent is not reading gossip; dropped a message from %s", origin)

    async def forward_deliveries(self) -> None:
        async for delivery in self.deliveries_out:
            await self.control.send(delivery)
            self.counters.delivered += 1

    async def publish_loop(self) -> None:
        # One task keeps publishes in order without letting a slow publish block the control loop.
        async for req in self.publish_out:
            error = None
            try:
                await self.pubsub.publish(self.topic, req.data)
                self.counters.published += 1
            except Exception as e:
                error = f"publish failed: {type(e).__name__}: {e}"
            await self.control.send(Ack(req.req_id, error))

    # ---- connections -------------------------------------------------------------------------

    async def dial(self, peer: str) -> str | None:
        """Connect to ``peer``: its direct addresses first, its circuit addresses once those
        failed or have not connected within :data:`CIRCUIT_HEAD_START` (a NAT'd peer's direct
        addresses are private and may only time out). None when connected, else every
        attempt's error."""
        if peer in self.connected():
            return None
        pid = ID.from_base58(peer)
        direct = self.known.get(peer, [])
        circuits = self.circuits.get(peer, [])
        errors: list[str] = []
        done = trio.Event()
        direct_over = trio.Event()

        async def directly() -> None:
            try:
                error = await self.dial_direct(pid, direct)
                if error is None:
                    done.set()
                    nursery.cancel_scope.cancel()  # connected: no relayed dial needed
                else:
                    errors.append(error)
            finally:
                direct_over.set()

        async def relayed() -> None:
            if direct:
                with trio.move_on_after(CIRCUIT_HEAD_START):
                    await direct_over.wait()
            for circuit in circuits:
                if done.is_set():
                    return
                error = await self.dial_circuit(pid, circuit)
                if error is None:
                    # Connected: stop waiting out a direct dial to private addresses (DCUtR
                    # tries the direct path again, properly, over the relayed connection).
                    done.set()
                    nursery.cancel_scope.cancel()
                    return
                errors.append(error)

        async with trio.open_nursery() as nursery:
            if direct or not circuits:
                nursery.start_soon(directly)
            if circuits:
                nursery.start_soon(relayed)
        return None if done.is_set() else "; ".join(errors)

    async def dial_direct(self, pid: ID, addrs: list[multiaddr.Multiaddr]) -> str | None:
        """Dial ``pid`` at its direct addresses, first clearing py-libp2p's failed-dial cache."""
        peer = pid.to_base58()
        with contextlib.suppress(Exception):
            self.host.get_network().unblock_peer(pid)
        with trio.move_on_after(DIAL_TIMEOUT):
            try:
                await self.host.connect(PeerInfo(pid, addrs))
                return None
            except Exception as e:
                return f"{peer}: {type(e).__name__}: {e}"
        return f"{peer}: no connection within {DIAL_TIMEOUT:g} s"

    async def dial_circuit(self, pid: ID, circuit: CircuitAddr) -> str | None:
        """Dial ``pid`` through the relay of ``circuit`` (:func:`.relay.dial_through`)."""
        peer = pid.to_base58()
        if circuit.relay == self.me:
            return f"{peer}: a circuit through ourselves"
        relay = info_from_p2p_addr(multiaddr.Multiaddr(circuit.relay_addr))
        with contextlib.suppress(Exception):
            self.host.get_network().unblock_peer(relay.peer_id)
        with trio.move_on_after(RELAY_DIAL_TIMEOUT):
            try:
                await dial_through(self.host, circuit, list(relay.addrs))
                self.relayed_out += 1
                log.info("connected to %s through relay %s", peer, circuit.relay)
                return None
            except Exception as e:
                return f"{peer} via relay {circuit.relay}: {type(e).__name__}: {e}"
        return f"{peer} via relay {circuit.relay}: no connection within {RELAY_DIAL_TIMEOUT:g} s"

    def connected(self) -> set[str]:
        return {p.to_base58() for p in self.host.get_connected_peers()}

    def relayed_peers(self) -> set[str]:
        """Connected peers with no direct connection (every connection goes through a relay)."""
        network = self.host.get_network()
        relayed = set()
        for pid in self.host.get_connected_peers():
            conns = network.get_connections(pid)
            if conns and all(_is_relayed(c) for c in conns):
                relayed.add(pid.to_base58())
        return relayed

    async def connect(self, req: Connect) -> None:
        errors: list[str] = []
        peers: list[str] = []
        for text in req.addrs:
            try:
                circuit = parse_circuit_addr(text)
                if circuit is not None:
                    peer = circuit.dest
                    ID.from_base58(peer)
                    if peer != self.me:
                        known = self.circuits.setdefault(peer, [])
                        if circuit not in known:
                            known.append(circuit)
                        peers.append(peer)
                    continue
                info = info_from_p2p_addr(multiaddr.Multiaddr(text))
            except Exception as e:
                errors.append(f"{text!r}: {e}")
                continue
            peer = info.peer_id.to_base58()
            if peer == self.me:
                continue
            addrs = self.known.setdefault(peer, [])
            addrs.extend(a for a in info.addrs if a not in addrs)
            peers.append(peer)
        results: list[str | None] = []

        async def one(peer: str) -> None:
            results.append(await self.dial(peer))

        async with trio.open_nursery() as nursery:
            for peer in dict.fromkeys(peers):
                nursery.start_soon(one, peer)
        errors.extend(r for r in results if r)
        await self.control.send(Ack(req.req_id, "; ".join(errors)[:4000] or None))

    async def redial_loop(self) -> None:
        while True:
            await trio.sleep(REDIAL_INTERVAL)
            connected = self.connected()
            # Peers that left the epoch are not chased; before any allow-list, everyone is.
            missing = [
                p
                for p in {**self.known, **self.circuits}
                if p not in connected and (not self.allowed or p in self.allowed)
            ]
            async with trio.open_nursery() as nursery:
                for peer in missing:
                    nursery.start_soon(self.dial, peer)

    # ---- relay reservations ------------------------------------------------------------------

    async def reserve(self, req: Reserve) -> None:
        """Make ``req.relay_addrs`` the relays we hold reservations on; reply with our circuit
        addresses through those that accepted."""
        errors: list[str] = []
        wanted: dict[str, list[str]] = {}
        for text in req.relay_addrs:
            try:
                _, relay = relay_of(text)
                ID.from_base58(relay)
                multiaddr.Multiaddr(text)
                circuit_addr(text, self.me)
            except Exception as e:
                errors.append(f"{text!r}: {e}")
                continue
            addrs = wanted.setdefault(relay, [])
            if text not in addrs:
                addrs.append(text)
        previous = self.relays
        self.relays = {}
        for relay, addrs in wanted.items():
            state = previous.get(relay) or RelayState(addrs)
            state.addrs = addrs
            self.relays[relay] = state
        async with trio.open_nursery() as nursery:
            for relay in self.relays:
                nursery.start_soon(self.reserve_one, relay, True)
        errors.extend(f"relay {r}: {s.error}" for r, s in self.relays.items() if s.error)
        await self.control.send(
            Reserved(req.req_id, self.circuit_addrs()[:64], [e[:4000] for e in errors[:64]])
        )

    async def reserve_one(self, relay: str, now: bool = False) -> None:
        """Reserve (or renew) on ``relay``; ``now`` overrides a pending retry pause. One attempt
        per relay at a time: with ``now``, an attempt already in flight is waited for instead."""
        state = self.relays.get(relay)
        if state is None:
            return
        if state.attempt is not None:
            if now:
                await state.attempt.wait()
            return
        if not now and time.monotonic() < state.next_try:
            return
        state.attempt = trio.Event()
        try:
            pid = ID.from_base58(relay)
            infos = [info_from_p2p_addr(multiaddr.Multiaddr(a)) for a in state.addrs]
            addrs = list(dict.fromkeys(a for info in infos for a in info.addrs))
            with contextlib.suppress(Exception):
                self.host.get_network().unblock_peer(pid)
            error: str | None = f"no reservation within {RESERVE_TIMEOUT:g} s"
            with trio.move_on_after(RESERVE_TIMEOUT):
                try:
                    expires = await reserve_on(self.host, PeerInfo(pid, addrs))
                    error = None
                except Exception as e:
                    error = f"{type(e).__name__}: {e}"
            if error is None:
                life = max(expires - time.time(), 0.0)
                if not state.expires:
                    log.info("reserved on relay %s for %.0f s", relay, life)
                state.expires, state.error = float(expires), None
                state.next_try = time.monotonic() + max(life / 2, REDIAL_INTERVAL)
            else:
                if state.error != error:
                    log.warning("reservation on relay %s failed: %s", relay, error)
                state.expires, state.error = 0.0, error
                state.next_try = time.monotonic() + RESERVE_RETRY
        finally:
            state.attempt.set()
            state.attempt = None

    async def relay_loop(self) -> None:
        while True:
            await trio.sleep(REDIAL_INTERVAL)
            await self.relay_tick()

    async def relay_tick(self) -> None:
        """Renew reservations at half their life, and remake one as soon as the relay is
        reachable again after its connection dropped (the relay voids it then)."""
        connected = self.connected()
        for relay, state in self.relays.items():
            if state.expires and (relay not in connected or state.expires <= time.time()):
                log.info("reservation on relay %s lost; reserving again", relay)
                state.expires = 0.0
                state.next_try = 0.0
        async with trio.open_nursery() as nursery:
            for relay in list(self.relays):
                nursery.start_soon(self.reserve_one, relay)

    def circuit_addrs(self) -> list[str]:
        """Our addresses through every relay we hold a live reservation on."""
        now = time.time()
        return [
            circuit_addr(addr, self.me)
            for state in self.relays.values()
            if state.expires > now
            for addr in state.addrs
        ]

    async def run_dcutr(self) -> None:
        """Run hole punching; if it ever fails, relayed connections just stay relayed."""
        try:
            async with background_trio_service(self.dcutr):
                await trio.sleep_forever()
        except Exception:
            log.exception("hole punching (DCUtR) stopped; relayed connections stay relayed")

    # ---- NAT detection -----------------------------------------------------------------------

    def observed_addrs(self) -> list[str]:
        """Where peers on direct connections see us (identify's observed address).

        py-libp2p keeps these in its host's observed-address manager, which has no public
        accessor below its activation threshold of 4 observers (``get_addrs``); one observer
        is enough to tell a NAT, so the manager is read directly."""
        manager = getattr(self.host, "_observed_addr_manager", None)
        if manager is None:
            return []
        try:
            return sorted({str(a) for a in manager.addrs(min_observers=1)})
        except Exception as e:
            log.debug("reading observed addresses failed: %s", e)
            return []

    def local_ips(self) -> set[str]:
        """The IPs we listen on; a wildcard listener counts every interface's."""
        if self._local_ips is None:
            ips = {ip for a in self.host.get_transport_addrs() if (ip := ip_of(str(a)))}
            if ips & {"0.0.0.0", "::"}:
                ips |= set(interface_ips())
            self._local_ips = ips
        return self._local_ips

    def nat_report(self) -> NatReport:
        observed = self.observed_addrs()
        return NatReport(
            observed_addrs=observed[:64],
            reachability=reachability(observed, self.local_ips()),
            circuit_addrs=self.circuit_addrs()[:64],
            reservations=self.relay.reservations(),
        )

    # ---- blobs, pings, stats -----------------------------------------------------------------

    async def open_blob_stream(self, peer: str) -> ByteStream:
        stream: ByteStream = await self.host.new_stream(
            ID.from_base58(peer), [TProtocol(BLOB_PROTOCOL)]
        )
        return stream

    async def handle_blob_stream(self, stream: Any) -> None:
        await self.server.handle(stream, stream.muxed_conn.peer_id.to_base58())

    def liars_for(self, blob_hash: bytes) -> set[str]:
        """The (live, shared) set of peers known to serve wrong bytes for ``blob_hash``."""
        liars = self.liars.pop(blob_hash, None)
        if liars is None:
            liars = set()
            while len(self.liars) >= LIAR_MEMORY:
                del self.liars[next(iter(self.liars))]
        self.liars[blob_hash] = liars  # re-inserted: most recently used last
        return liars

    async def run_fetch(self, req: Fetch) -> None:
        with trio.CancelScope() as scope:
            self.fetches[req.req_id] = scope
            try:
                result = await fetch_blob(
                    FetchRequest(
                        req.req_id,
                        req.blob_hash,
                        req.max_size,
                        req.peers,
                        req.timeout,
                        req.attempt_timeout,
                    ),
                    blob_dir=self.blob_dir,
                    table=self.table,
                    is_allowed=self.is_allowed,
                    open_stream=self.open_blob_stream,
                    rejections=self.rejections,
                    liars=self.liars_for(req.blob_hash),
                    connected=self.connected,
                )
            finally:
                del self.fetches[req.req_id]
        if scope.cancelled_caught:
            result = FetchDone(req.req_id, None, None, 0, 0.0, [], FetchErrorKind.cancelled)
        if result.path is None:
            self.counters.fetches_failed += 1
        else:
            self.counters.fetches_ok += 1
        await self.control.send(result)

    async def ping_loop(self) -> None:
        while True:
            await trio.sleep(PING_INTERVAL)
            targets = self.connected() & self.allowed
            async with trio.open_nursery() as nursery:
                for peer in targets:
                    nursery.start_soon(self.ping_one, peer)

    async def ping_one(self, peer: str) -> None:
        with trio.move_on_after(2.0):
            try:
                stream = await self.host.new_stream(
                    ID.from_base58(peer), [TProtocol(PING_PROTOCOL)]
                )
                self.table.record_latency(peer, await ping(stream))
            except Exception as e:
                log.debug("ping %s failed: %s", peer, e)

    async def stats_loop(self) -> None:
        while True:
            gossip_peers = sorted(
                p.to_base58() for p in self.pubsub.peer_topics.get(self.topic, ())
            )
            self.counters.blobs_served = self.server.served
            self.counters.blob_requests_refused = self.server.refused
            self.counters.rejections = self.rejections.counts()
            self.counters.relayed_connections = self.relayed_out + self.relay.relayed_in
            self.counters.direct_upgrades_ok = self.dcutr.punches_ok + self.dcutr.direct_dials_ok
            self.counters.direct_upgrades_failed = self.dcutr.punches_failed
            self.counters.circuits_relayed = self.relay.admission.circuits_total
            self.counters.relay_refusals = sum(self.relay.admission.refusals.values())
            await self.control.send(
                peer_stats(
                    self.table,
                    self.connected(),
                    gossip_peers,
                    self.counters,
                    relayed=self.relayed_peers(),
                    nat=self.nat_report(),
                )
            )
            await trio.sleep(STATS_INTERVAL)

    # ---- control -----------------------------------------------------------------------------

    async def control_loop(self, nursery: trio.Nursery) -> None:
        """Serve parent requests until Shutdown or EOF, which both end the process."""
        while (frame := await self.control.receive()) is not None:
            msg = decode_parent(frame)
            if isinstance(msg, Shutdown):
                return
            if isinstance(msg, Publish):
                try:
                    self.publish_in.send_nowait(msg)
                except trio.WouldBlock:
                    nursery.start_soon(self.control.send, Ack(msg.req_id, "publish queue full"))
            elif isinstance(msg, Connect):
                nursery.start_soon(self.connect, msg)
            elif isinstance(msg, SetAllowedPeers):
                self.allowed = frozenset(msg.peer_ids)
                self.table.retain(self.allowed)
                self.relay.retain()
            elif isinstance(msg, Reserve):
                nursery.start_soon(self.reserve, msg)
            elif isinstance(msg, Serve):
                self.server.serve(msg.blob_hash, msg.path, msg.size, handoff=msg.handoff)
            elif isinstance(msg, Unserve):
                self.server.unserve(msg.blob_hash)
            elif isinstance(msg, Fetch):
                nursery.start_soon(self.run_fetch, msg)
            elif isinstance(msg, CancelFetch):
                if (scope := self.fetches.get(msg.req_id)) is not None:
                    scope.cancel()
            else:
                log.warning("ignoring unexpected control message %s", type(msg).__name__)
