"""The host's peerstore cleanup survives a peer whose signed record has expired.

libp2p 0.8.1 raises from its own cleanup for exactly such a peer, which ended the host process
of a client about four minutes into a 32-host run (psyche.p2p.host.peerstore)."""

from __future__ import annotations

import multiaddr
import pytest
from libp2p.peer.envelope import seal_record
from libp2p.peer.id import ID
from libp2p.peer.peer_record import PeerRecord
from libp2p.peer.peerstore import PeerStore, PeerStoreError

from psyche.p2p.host.main import libp2p_key_pair
from psyche.p2p.host.peerstore import make_cleanup_safe
from psyche.protocol.identity import SecretKey


def _store_with_an_expired_record() -> tuple[PeerStore, ID]:
    pair = libp2p_key_pair(SecretKey.generate())
    peer = ID.from_pubkey(pair.public_key)
    store = PeerStore()
    record = PeerRecord(peer, [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/4001")])
    assert store.consume_peer_record(seal_record(record, pair.private_key), ttl=60)
    store.peer_data_map[peer].last_identified -= 120  # its addresses' 60 s have passed
    return store, peer


def test_the_librarys_cleanup_raises_for_an_expired_signed_peer() -> None:
    """The bug this module works around (if a libp2p upgrade fixes it, this test says so)."""
    store, _ = _store_with_an_expired_record()
    with pytest.raises(PeerStoreError, match="expired"):
        store._cleanup_expired_records()


def test_the_hosts_cleanup_drops_the_expired_peer_and_its_record() -> None:
    store, peer = _store_with_an_expired_record()
    make_cleanup_safe(store)
    store._cleanup_expired_records()
    assert peer not in store.peer_data_map and peer not in store.peer_record_map


def test_a_live_peer_keeps_its_record() -> None:
    store, peer = _store_with_an_expired_record()
    store.peer_data_map[peer].update_last_identified()
    make_cleanup_safe(store)
    store._cleanup_expired_records()
    assert peer in store.peer_record_map and store.addrs(peer)
