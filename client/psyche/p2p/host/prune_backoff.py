"""GossipSub that backs off from the peers its own heartbeat prunes, as the protocol requires.

py-libp2p 0.8.1's ``mesh_heartbeat`` prunes an oversubscribed mesh without recording a back-off
for the pruned peers, so when the mesh later runs thin (peers pruning *it*, common on loaded
cores) the next heartbeat may GRAFT one of them again within seconds. That peer took the PRUNE
as the start of a back-off (60 s) and its GRAFT flood protection reads the early GRAFT as an
attack: it penalizes the pruner's score and prunes it again. At 32 real hosts on 2 cores a few
hosts were so penalized by most peers (1,188 "GRAFT flood detected" lines in one run, most about
two hosts), dropped out of every mesh, and never heard some round results nor any of their
resends (docs/p2p-nat.md, "py-libp2p defects", item 13). go-libp2p adds the back-off when it
prunes (``addBackoff`` in its heartbeat), so this does the same.
"""

from __future__ import annotations

from collections import defaultdict

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub

__all__ = ["PruneBackoffGossipSub"]


class PruneBackoffGossipSub(GossipSub):
    def mesh_heartbeat(self) -> tuple[defaultdict[ID, list[str]], defaultdict[ID, list[str]]]:
        to_graft, to_prune = super().mesh_heartbeat()
        for peer, topics in to_prune.items():
            for topic in topics:
                self._add_back_off(peer, topic, False)
        return to_graft, to_prune
