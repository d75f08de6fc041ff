"""Peer rendezvous on Solana: a bootstrap multiaddr list (decision recorded in docs/solana.md).

The centralized server relays every client's P2P addresses; a Solana run has no server, and the
coordinator account stores only keys. So a client is given ``--bootstrap-peers`` (env
``PSYCHE_BOOTSTRAP_PEERS``): libp2p multiaddrs ending in ``/p2p/<peer id>`` of other clients of
the run (for instance the run creator's own client, published with the run). The peer id embeds
the ed25519 key, so each address is filed under the P2P key the coordinator lists, and the daemon
dials those of the epoch's clients. Beyond them, peers are learned from the network itself:
gossipsub relays announcements through any connected peer, peers that dial us are known to the
host, and a blob is fetched from any epoch client holding it (the bootstrap peers download every
payload). :meth:`BootstrapDirectory.learn` is where a gossiped address record would be fed in.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from psyche.p2p.peer_id import public_key_for

__all__ = ["BootstrapDirectory", "parse_bootstrap_peers"]

log = logging.getLogger(__name__)


class BootstrapError(ValueError):
    """A bootstrap peer address is not a ``/…/p2p/<peer id>`` multiaddr of an ed25519 key."""


def parse_bootstrap_peers(text: str | Iterable[str] | None) -> dict[bytes, list[str]]:
    """Multiaddrs (comma/whitespace separated, or a list) → addresses by P2P key."""
    if text is None:
        return {}
    items = re.split(r"[\s,]+", text) if isinstance(text, str) else list(text)
    out: dict[bytes, list[str]] = {}
    for addr in (a.strip() for a in items):
        if not addr:
            continue
        if "/p2p/" not in addr:
            raise BootstrapError(f"bootstrap peer {addr!r} must end in /p2p/<peer id>")
        peer_id = addr.rsplit("/p2p/", 1)[1].split("/")[0]
        try:
            key = public_key_for(peer_id)
        except Exception as e:
            raise BootstrapError(f"bootstrap peer {addr!r}: bad peer id: {e}") from None
        addrs = out.setdefault(key, [])
        if addr not in addrs:
            addrs.append(addr)
    return out


class BootstrapDirectory:
    """The daemon's ``PeerDirectory`` on Solana."""

    def __init__(self, bootstrap: dict[bytes, list[str]] | None = None) -> None:
        self._peers: dict[bytes, list[str]] = {k: list(v) for k, v in (bootstrap or {}).items()}
        self.my_addrs: list[str] = []

    async def publish_p2p_addrs(self, addrs: list[str]) -> None:
        # Nowhere to publish to: print them so an operator can hand them to other clients.
        self.my_addrs = list(addrs)
        log.info("P2P addresses of this client (bootstrap peers for others): %s", " ".join(addrs))

    def learn(self, key: bytes, addrs: Iterable[str]) -> None:
        known = self._peers.setdefault(bytes(key), [])
        known.extend(a for a in addrs if a not in known)

    def peer_addrs(self) -> dict[bytes, list[str]]:
        return {k: list(v) for k, v in self._peers.items()}
