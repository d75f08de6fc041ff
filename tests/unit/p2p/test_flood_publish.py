"""A host's own gossip reaches every peer on the topic when its mesh is thin; what it forwards
goes through its mesh."""

from __future__ import annotations

from types import SimpleNamespace

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11

from psyche.p2p.host.flood_publish import FloodPublishGossipSub

ME, A, B, C, D = (ID(name.encode()) for name in ("me", "a", "b", "c", "d"))


def _router(mesh: set[ID]) -> FloodPublishGossipSub:
    router = FloodPublishGossipSub(
        protocols=[PROTOCOL_ID_V11], degree=3, degree_low=2, degree_high=4
    )
    router.pubsub = SimpleNamespace(my_id=ME, peer_topics={"t": {A, B, C, D}})  # type: ignore[assignment]
    router.mesh = {"t": mesh}
    router.peer_protocol = dict.fromkeys((A, B, C, D), PROTOCOL_ID_V11)
    return router


def test_own_messages_reach_every_topic_peer_when_the_mesh_is_thin() -> None:
    # An empty mesh is what a loaded host was left with after its peers pruned it: py-libp2p's
    # own rule then sent its announcements to nobody. Below degree_low (2 here) they go to
    # every peer on the topic; a healthy mesh is used as it is (flooding always cost a 24-host
    # run more CPU per round).
    for mesh in (set(), {A}):
        sent = set(_router(mesh)._get_peers_to_send(["t"], msg_forwarder=ME, origin=ME))
        assert sent == {A, B, C, D}
    sent = set(_router({A, B})._get_peers_to_send(["t"], msg_forwarder=ME, origin=ME))
    assert sent == {A, B}


def test_forwarded_messages_still_go_through_the_mesh_only() -> None:
    router = _router({A, B})
    assert set(router._get_peers_to_send(["t"], msg_forwarder=C, origin=D)) == {A, B}
    assert set(router._get_peers_to_send(["t"], msg_forwarder=A, origin=A)) == {B}
    assert set(router._get_peers_to_send(["other"], msg_forwarder=ME, origin=ME)) == set()
