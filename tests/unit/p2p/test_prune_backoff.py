"""A peer this host's heartbeat prunes is not grafted again before its back-off is over."""

from __future__ import annotations

from types import SimpleNamespace

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub

from psyche.p2p.host.prune_backoff import PruneBackoffGossipSub

PEERS = [ID(f"peer-{i}".encode()) for i in range(8)]


def _pruned_then_grafted(router: GossipSub) -> tuple[set[ID], set[ID]]:
    """A mesh over ``degree_high`` is pruned; then every other peer leaves the mesh (they
    pruned us) and the next heartbeat grafts: which peers were pruned, which grafted."""
    router.pubsub = SimpleNamespace(peer_topics={"t": set(PEERS)})  # type: ignore[assignment]
    router.peer_protocol = dict.fromkeys(PEERS, PROTOCOL_ID_V11)
    router.mesh = {"t": set(PEERS)}
    _, to_prune = router.mesh_heartbeat()
    pruned = set(to_prune)
    router.mesh = {"t": set()}
    to_graft, _ = router.mesh_heartbeat()
    return pruned, set(to_graft)


def _router(cls: type[GossipSub]) -> GossipSub:
    return cls(protocols=[PROTOCOL_ID_V11], degree=3, degree_low=2, degree_high=4)


def test_a_pruned_peer_is_not_grafted_again_within_its_backoff() -> None:
    pruned, grafted = _pruned_then_grafted(_router(PruneBackoffGossipSub))
    assert len(pruned) == 5 and len(grafted) == 3
    # It would take our GRAFT for a flood (py-libp2p's P7 check) and penalize us.
    assert not pruned & grafted


def test_py_libp2p_alone_grafts_peers_it_has_just_pruned() -> None:
    # Why the subclass exists: with 5 of 8 peers pruned, a fresh pick of 3 hits a pruned one
    # in 55 of 56 tries; over 20 tries it must happen (never: (1/56)^20, about 1e-35).
    hits = sum(bool(set.intersection(*_pruned_then_grafted(_router(GossipSub)))) for _ in range(20))
    assert hits > 0
