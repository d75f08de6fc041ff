"""What the libp2p host process does, once its host and pubsub exist (trio).

:class:`HostService` holds the state that lives as long as the host process and runs its tasks:

* gossip: a pubsub topic validator admits only messages whose libp2p-verified originator is in
  the allow-list and whose data fits :data:`~psyche.p2p.messages.MAX_ANNOUNCEMENT` (rejected
  messages are not forwarded either; they are counted by kind and the first of each kind from
  each peer is logged, :mod:`psyche.p2p.rejections`); deliveries go to the parent through a
  bounded buffer whose overflow is counted and logged, never silent; publishes are queued so a
  slow publish cannot block the control loop;
* connections: dials with a deadline, and a redial loop for every peer the parent asked for,
  clearing py-libp2p's 60 s failed-dial cache first (py-libp2p never redials by itself);
* blobs: serves registered files (:class:`~psyche.p2p.blobs.BlobServer`) and runs fetches
  (:func:`~psyche.p2p.fetch.fetch_blob`), each cancellable by the parent; a peer that served
  wrong bytes for a blob is remembered and not asked for that blob again;
* measurements: pings allowed peers every few seconds and reports per-peer latency, bandwidth and
  running counters to the parent about once a second.

:class:`ControlChannel` is the trio end of the control socket (:mod:`psyche.p2p.control`).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import multiaddr
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub

from psyche.p2p.blobs import BLOB_PROTOCOL, PING_PROTOCOL, BlobServer, ByteStream, ping
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
    Serve,
    SetAllowedPeers,
    Shutdown,
    Unserve,
    decode_parent,
    encode_frame,
)
from psyche.p2p.fetch import FetchRequest, fetch_blob
from psyche.p2p.messages import MAX_ANNOUNCEMENT, gossip_topic
from psyche.p2p.peers import HostCounters, PeerTable, peer_stats
from psyche.p2p.rejections import Rejection, Rejections

__all__ = ["ControlChannel", "HostService"]

log = logging.getLogger("psyche.p2p.host")

REDIAL_INTERVAL = 3.0
DIAL_TIMEOUT = 5.0
PING_INTERVAL = 3.0
STATS_INTERVAL = 1.0
DELIVERY_BUFFER = 4096
LIAR_MEMORY = 1024
"""Blobs for which the peers that served wrong bytes are remembered (oldest forgotten first)."""


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
        """Dial ``peer`` at its known addresses, first clearing py-libp2p's failed-dial cache."""
        pid = ID.from_base58(peer)
        addrs = self.known.get(peer, [])
        with contextlib.suppress(Exception):
            self.host.get_network().unblock_peer(pid)
        with trio.move_on_after(DIAL_TIMEOUT):
            try:
                await self.host.connect(PeerInfo(pid, addrs))
                return None
            except Exception as e:
                return f"{peer}: {type(e).__name__}: {e}"
        return f"{peer}: no connection within {DIAL_TIMEOUT:g} s"

    def connected(self) -> set[str]:
        return {p.to_base58() for p in self.host.get_connected_peers()}

    async def connect(self, req: Connect) -> None:
        errors: list[str] = []
        peers: list[str] = []
        for text in req.addrs:
            try:
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
                for p in self.known
                if p not in connected and (not self.allowed or p in self.allowed)
            ]
            async with trio.open_nursery() as nursery:
                for peer in missing:
                    nursery.start_soon(self.dial, peer)

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
            await self.control.send(
                peer_stats(self.table, self.connected(), gossip_peers, self.counters)
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
            elif isinstance(msg, Serve):
                self.server.serve(msg.blob_hash, msg.path, msg.size)
            elif isinstance(msg, Unserve):
                self.server.unserve(msg.blob_hash)
            elif isinstance(msg, Fetch):
                nursery.start_soon(self.run_fetch, msg)
            elif isinstance(msg, CancelFetch):
                if (scope := self.fetches.get(msg.req_id)) is not None:
                    scope.cancel()
            else:
                log.warning("ignoring unexpected control message %s", type(msg).__name__)
