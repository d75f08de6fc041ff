"""Bootstrap peers on Solana: multiaddrs an operator hands a client (``--bootstrap-peers``).

Peers are found from their peer records on chain (:mod:`psyche.backends.solana.discovery`);
this list is an optional extra, e.g. the run creator's own always-on client published with the
run. Each address must end in ``/p2p/<peer id>``; the peer id embeds the ed25519 key, so the
address is filed under the P2P key the coordinator lists. :class:`BootstrapDirectory` is the
whole directory when a backend is built without a chain directory (tests, tools).
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
