"""A host's own gossip goes to every peer on the topic; what it forwards, through its mesh."""

from __future__ import annotations

from types import SimpleNamespace

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11

from psyche.p2p.host.flood_publish import FloodPublishGossipSub

ME, A, B, C, D = (ID(name.encode()) for name in ("me", "a", "b", "c", "d"))


def _router(mesh: set[ID]) -> FloodPublishGossipSub:
    router = FloodPublishGossipSub(
        protocols=[PROTOCOL_ID_V11], degree=2, degree_low=1, degree_high=3
    )
    router.pubsub = SimpleNamespace(my_id=ME, peer_topics={"t": {A, B, C, D}})  # type: ignore[assignment]
    router.mesh = {"t": mesh}
    router.peer_protocol = dict.fromkeys((A, B, C, D), PROTOCOL_ID_V11)
    return router


def test_own_messages_reach_every_topic_peer_even_with_an_empty_mesh() -> None:
    # An empty mesh is what a loaded host was left with after its peers pruned it: py-libp2p's
    # own rule then sent its announcements to nobody.
    for mesh in (set(), {A}):
        sent = set(_router(mesh)._get_peers_to_send(["t"], msg_forwarder=ME, origin=ME))
        assert sent == {A, B, C, D}


def test_forwarded_messages_still_go_through_the_mesh_only() -> None:
    router = _router({A, B})
    assert set(router._get_peers_to_send(["t"], msg_forwarder=C, origin=D)) == {A, B}
    assert set(router._get_peers_to_send(["t"], msg_forwarder=A, origin=A)) == {B}
    assert set(router._get_peers_to_send(["other"], msg_forwarder=ME, origin=ME)) == set()
