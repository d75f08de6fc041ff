"""The run's gossip topic on the host side (trio).

A pubsub topic validator admits only messages whose libp2p-verified originator is in the
allow-list and whose data fits :data:`~psyche.p2p.messages.MAX_ANNOUNCEMENT`; rejected messages
are not forwarded either (they are counted by kind and the first of each kind from each peer is
logged, :mod:`psyche.p2p.rejections`). Deliveries go to the parent through a bounded buffer whose
overflow is counted and logged, never silent; publishes are queued so a slow publish cannot block
the control loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub

from psyche.p2p.control import Ack, Delivery, Publish
from psyche.p2p.host.channel import ControlChannel
from psyche.p2p.host.peers import HostCounters
from psyche.p2p.messages import MAX_ANNOUNCEMENT
from psyche.p2p.rejections import Rejection, Rejections

__all__ = ["DELIVERY_BUFFER", "Gossip"]

log = logging.getLogger("psyche.p2p.host")

DELIVERY_BUFFER = 4096


class Gossip:
    """Validation, deliveries to the parent and queued publishes on one pubsub topic."""

    def __init__(
        self,
        control: ControlChannel,
        pubsub: Pubsub,
        topic: str,
        me: str,
        counters: HostCounters,
        rejections: Rejections,
        is_allowed: Callable[[str], bool],
    ) -> None:
        self.control = control
        self.pubsub = pubsub
        self.topic = topic
        self.me = me
        self.counters = counters
        self.rejections = rejections
        self.is_allowed = is_allowed
        self.deliveries_in, self.deliveries_out = trio.open_memory_channel[Delivery](
            DELIVERY_BUFFER
        )
        self.publish_in, self.publish_out = trio.open_memory_channel[Publish](DELIVERY_BUFFER)

    def validate(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """Pubsub topic validator: runs for every message before delivery and forwarding."""
        origin = ID(msg.from_id).to_base58()
        if origin == self.me:
            return True
        if len(msg.data) > MAX_ANNOUNCEMENT:
            self.counters.dropped_oversize += 1
            self.rejections.record(Rejection.oversized_gossip, origin, f"{len(msg.data)} bytes")
            return False
        if not self.is_allowed(origin):
            self.counters.dropped_not_allowed += 1
            self.rejections.record(Rejection.non_member_gossip, origin)
            return False
        return True

    async def read_gossip(self, subscription: Any) -> None:
        while True:
            msg = await subscription.get()
            origin = ID(msg.from_id).to_base58()
            if origin == self.me:
                # The daemon applies its own announcements directly (docs/protocol.md,
                # "Training and publishing").
                continue
            self.deliver(origin, msg.data)

    def deliver(self, origin: str, data: bytes) -> None:
        """Hand ``data`` from ``origin`` to the parent (gossip, or :mod:`.direct`), or count
        and log the drop when the parent is not keeping up."""
        try:
            self.deliveries_in.send_nowait(Delivery(from_peer=origin, data=data))
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
