"""GossipSub that sends this host's own messages to every peer on the topic when its mesh is
thin.

py-libp2p 0.8.1 sends a message a host publishes itself only to its mesh peers for the topic.
On loaded cores the mesh churns (PRUNEs and GRAFT back-offs), and a publisher left with an
empty mesh sent its announcements to nobody: at 32 real hosts on 2 cores two producers' round
results and all three resends of each reached no host for a whole round (docs/p2p-nat.md,
"py-libp2p defects", item 12). go-libp2p and rust-libp2p flood every own message to every peer
on the topic by default (GossipSub v1.1's flood publishing); here only a publisher whose mesh
has fewer than ``degree_low`` peers does, so a healthy mesh costs nothing extra. Messages from
others are forwarded through the mesh as before.
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
                if len(self.mesh.get(topic, ())) < self.degree_low:
                    peers.update(pubsub.peer_topics.get(topic, ()))
            peers.discard(origin)
        return peers
