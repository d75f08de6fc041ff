"""What the libp2p host process does, once its host and pubsub exist (trio).

:class:`HostService` holds the state that lives as long as the host process, runs its tasks and
serves the parent's requests (:meth:`HostService.control_loop`). Each concern has its module:

* gossip (:mod:`.gossip`): the topic validator (members only, bounded size), deliveries to the
  parent and queued publishes; announcements sent to or received from named members directly
  (:mod:`.direct`), delivered the same way;
* connections (:mod:`.dialing`): dials with a deadline, circuit dials through relays, and a redial
  loop for every peer the parent asked for;
* NAT traversal: a relay for members (:mod:`.relay`, bounded by :mod:`psyche.p2p.nat`), our
  reservations on the relays the parent names (:mod:`.reservations`), DCUtR hole punching over
  relayed connections (:mod:`.hole_punch`), and where peers observe us, so whether we are behind
  a NAT (:mod:`.nat_status`), which goes out with the stats;
* blobs, here: serves registered files (:class:`~psyche.p2p.host.blobs.BlobServer`) and runs
  fetches (:func:`~psyche.p2p.host.fetch.fetch_blob`), each cancellable by the parent; a peer
  that served wrong bytes for a blob is remembered and not asked for that blob again;
* measurements, here: pings up to 8 allowed peers every few seconds, in rotation, and reports
  per-peer latency, bandwidth and running counters to the parent about once a second.

:class:`~.channel.ControlChannel` is the trio end of the control socket
(:mod:`psyche.p2p.control`).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service

from psyche.p2p.control import (
    MAX_PEERS,
    Ack,
    CancelFetch,
    Connect,
    Fetch,
    FetchDone,
    FetchErrorKind,
    Init,
    Publish,
    Reserve,
    Serve,
    SetAllowedPeers,
    Shutdown,
    Tell,
    Unserve,
    decode_parent,
)
from psyche.p2p.host.blobs import BLOB_PROTOCOL, PING_PROTOCOL, BlobServer, ByteStream, ping
from psyche.p2p.host.channel import ControlChannel
from psyche.p2p.host.dialing import Dialer
from psyche.p2p.host.direct import TELL_PROTOCOL, DirectAnnouncements
from psyche.p2p.host.fetch import FetchRequest, fetch_blob
from psyche.p2p.host.gossip import Gossip
from psyche.p2p.host.hole_punch import CountingDCUtR
from psyche.p2p.host.nat_status import NatStatus
from psyche.p2p.host.peers import HostCounters, PeerTable, PingRotation, peer_stats
from psyche.p2p.host.relay import MemberRelay
from psyche.p2p.host.reservations import Reservations
from psyche.p2p.messages import gossip_topic
from psyche.p2p.nat import DEFAULT_RELAY_LIMITS
from psyche.p2p.rejections import Rejections

__all__ = ["HostService"]

log = logging.getLogger("psyche.p2p.host")

PING_INTERVAL = 3.0
STATS_INTERVAL = 1.0
LIAR_MEMORY = 1024
"""Blobs for which the peers that served wrong bytes are remembered (oldest forgotten first)."""


class HostService:
    """Everything that lives for the host process's lifetime, and its background tasks."""

    def __init__(self, control: ControlChannel, init: Init, host: Any, pubsub: Pubsub) -> None:
        self.control = control
        self.host = host
        self.pubsub = pubsub
        self.blob_dir = Path(init.blob_dir)
        self.me = host.get_id().to_base58()
        self.allowed: frozenset[str] = frozenset()
        self.table = PeerTable()
        self.pings = PingRotation()
        self.counters = HostCounters()
        self.rejections = Rejections(log)
        self.gossip = Gossip(
            control,
            pubsub,
            gossip_topic(init.run_id),
            self.me,
            self.counters,
            self.rejections,
            self.is_allowed,
        )
        self.dialer = Dialer(control, host, self.me, lambda: self.allowed)
        self.direct = DirectAnnouncements(
            self.gossip.deliver,
            functools.partial(self.open_stream, protocol=TELL_PROTOCOL),
            self.is_allowed,
            self.counters,
            self.rejections,
            self.dialer.connected,
        )
        self.reservations = Reservations(control, host, self.me, self.dialer.connected)
        self.liars: dict[bytes, set[str]] = {}
        """Per blob, the peers that served bytes not matching its hash (insertion ordered)."""
        self.server = BlobServer(is_allowed=self.is_allowed)
        self.fetches: dict[int, trio.CancelScope] = {}
        self.relay = MemberRelay(host, DEFAULT_RELAY_LIMITS, self.is_allowed, self.rejections)
        self.dcutr = CountingDCUtR(host, self.is_allowed)
        self.nat = NatStatus(host, self.relay, self.reservations.circuit_addrs)

    def is_allowed(self, peer: str) -> bool:
        return peer in self.allowed

    async def run_dcutr(self) -> None:
        """Run hole punching; if it ever fails, relayed connections just stay relayed."""
        try:
            async with background_trio_service(self.dcutr):
                await trio.sleep_forever()
        except Exception:
            log.exception("hole punching (DCUtR) stopped; relayed connections stay relayed")

    # ---- blobs -------------------------------------------------------------------------------

    async def open_stream(self, peer: str, protocol: str = BLOB_PROTOCOL) -> ByteStream:
        stream: ByteStream = await self.host.new_stream(ID.from_base58(peer), [TProtocol(protocol)])
        return stream

    async def handle_blob_stream(self, stream: Any) -> None:
        await self.server.handle(stream, stream.muxed_conn.peer_id.to_base58())

    async def handle_tell_stream(self, stream: Any) -> None:
        await self.direct.handle(stream, stream.muxed_conn.peer_id.to_base58())

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
                        req.digest,
                    ),
                    blob_dir=self.blob_dir,
                    table=self.table,
                    is_allowed=self.is_allowed,
                    open_stream=self.open_stream,
                    rejections=self.rejections,
                    liars=self.liars_for(req.blob_hash),
                    connected=self.dialer.connected,
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

    # ---- pings and stats ---------------------------------------------------------------------

    async def ping_loop(self) -> None:
        while True:
            await trio.sleep(PING_INTERVAL)
            targets = self.pings.due(
                self.dialer.connected() & self.allowed, self.dialer.relayed_peers()
            )
            async with trio.open_nursery() as nursery:
                for peer in targets:
                    nursery.start_soon(self.ping_one, peer)

    async def ping_one(self, peer: str) -> None:
        with trio.move_on_after(2.0):
            try:
                stream = await self.open_stream(peer, PING_PROTOCOL)
                self.table.record_latency(peer, await ping(stream))
            except Exception as e:
                log.debug("ping %s failed: %s", peer, e)

    async def stats_loop(self) -> None:
        while True:
            gossip_peers = sorted(
                p.to_base58() for p in self.pubsub.peer_topics.get(self.gossip.topic, ())
            )
            self.counters.blobs_served = self.server.served
            self.counters.blob_requests_refused = self.server.refused
            self.counters.rejections = self.rejections.counts()
            self.counters.relayed_connections = self.dialer.relayed_out + self.relay.relayed_in
            self.counters.direct_upgrades_ok = self.dcutr.punches_ok + self.dcutr.direct_dials_ok
            self.counters.direct_upgrades_failed = self.dcutr.punches_failed
            self.counters.circuits_relayed = self.relay.admission.circuits_total
            self.counters.relay_refusals = sum(self.relay.admission.refusals.values())
            await self.control.send(
                peer_stats(
                    self.table,
                    self.dialer.connected(),
                    gossip_peers,
                    self.counters,
                    relayed=self.dialer.relayed_peers(),
                    nat=self.nat.report(),
                    asked=self.server.take_asked(MAX_PEERS),
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
                    self.gossip.publish_in.send_nowait(msg)
                except trio.WouldBlock:
                    nursery.start_soon(self.control.send, Ack(msg.req_id, "publish queue full"))
            elif isinstance(msg, Tell):
                nursery.start_soon(self.direct.send, msg.peers, msg.data)
            elif isinstance(msg, Connect):
                nursery.start_soon(self.dialer.connect, msg)
            elif isinstance(msg, SetAllowedPeers):
                self.allowed = frozenset(msg.peer_ids)
                self.table.retain(self.allowed)
                self.relay.retain()
                self.direct.budget.retain(self.allowed)
            elif isinstance(msg, Reserve):
                nursery.start_soon(self.reservations.reserve, msg)
            elif isinstance(msg, Serve):
                self.server.serve(
                    msg.blob_hash,
                    msg.path,
                    msg.size,
                    handoff=msg.handoff,
                    report_askers=msg.report_askers,
                )
            elif isinstance(msg, Unserve):
                self.server.unserve(msg.blob_hash)
            elif isinstance(msg, Fetch):
                nursery.start_soon(self.run_fetch, msg)
            elif isinstance(msg, CancelFetch):
                if (scope := self.fetches.get(msg.req_id)) is not None:
                    scope.cancel()
            else:
                log.warning("ignoring unexpected control message %s", type(msg).__name__)
