"""Keep py-libp2p's peerstore cleanup from killing the host process.

libp2p 0.8.1's `PeerStore._cleanup_expired_records` (which the host runs every minute) calls
`maybe_delete_peer_record` for every expired peer, and that asks `addrs(peer)`, which raises
`PeerStoreError("peer ID is expired")` for exactly those peers. So the first time a peer that
sent a signed peer record expires, the cleanup task raises, the host's nursery fails and the
whole host process exits: a client drops off the P2P network for a library bug. Seen with 32
real hosts on 2 cores about four minutes in (bench/scale.py --p2p-hosts 32, bench/README.md).

`make_cleanup_safe` replaces the one method on the host's peerstore instance with what it was
meant to do: an expired peer has no live addresses, so its record is dropped.
"""

from __future__ import annotations

from typing import Any

from libp2p.peer.id import ID
from libp2p.peer.peerstore import PeerStoreError

__all__ = ["make_cleanup_safe"]


def make_cleanup_safe(peerstore: Any) -> None:
    """Make `peerstore`'s expiry cleanup drop an expired peer's record instead of raising."""
    original = peerstore.maybe_delete_peer_record

    def maybe_delete_peer_record(peer_id: ID) -> None:
        try:
            original(peer_id)
        except PeerStoreError:
            peerstore.peer_record_map.pop(peer_id, None)

    peerstore.maybe_delete_peer_record = maybe_delete_peer_record
