"""GossipSub that floods this host's own messages to every peer on the topic.

py-libp2p 0.8.1 sends a message a host publishes itself only to its mesh peers for the topic.
go-libp2p and rust-libp2p flood their own messages to every peer on the topic by default
(GossipSub v1.1's "flood publishing"), so a publisher whose mesh is empty or churning still
reaches everyone, in one hop. With the mesh alone, a host on loaded cores whose mesh peers had
pruned it (GRAFT back-offs, "GRAFT flood" penalties) published into nothing: at 32 real hosts on
2 cores two producers' round announcements and all three of their resends reached nobody for a
whole round (bench/README.md, "Own announcements flooded"). Messages from others are forwarded
through the mesh as before, so the extra cost is one copy per peer of the few messages a client
itself sends each round (its result, its ``Finished`` and their resends).
"""

from __future__ import annotations

from collections.abc import Iterable

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub

__all__ = ["FloodPublishGossipSub"]


class FloodPublishGossipSub(GossipSub):
    def _get_peers_to_send(
        self,
        topic_ids: Iterable[str],
        msg_forwarder: ID,
        origin: ID,
        msg_id: bytes | None = None,
    ) -> Iterable[ID]:
        topic_ids = list(topic_ids)
        peers = set(super()._get_peers_to_send(topic_ids, msg_forwarder, origin, msg_id))
        pubsub = self.pubsub
        if pubsub is not None and origin == msg_forwarder == pubsub.my_id:
            for topic in topic_ids:
                peers.update(pubsub.peer_topics.get(topic, ()))
            peers.discard(origin)
        return peers
