"""Peer-to-peer layer: gossip announcements and blob transfer between a run's clients.

See docs/protocol.md, "Networking".

The libp2p host runs in its own process (docs/p2p-nat.md, "The libp2p host process"); the
modules split along that boundary.

Daemon side (asyncio; imports neither trio nor libp2p):
  ``node``      :class:`P2PNode`, the API the daemon uses
  ``process``   spawning the host process and the request/reply plumbing to it
  ``control``   the framed control protocol both processes speak
  ``messages``  the signed announcement schema (``sign_announcement``/``open_announcement``)
  ``peer_id``   peer ids from the client's ed25519 key; ``show_identity``
  ``errors``    the :class:`P2PError` family
  ``rejections`` counting refused peer input by kind, one warning per peer (host side too)
  ``nat``       relay limits and admission, circuit addresses, the reachability verdict (pure;
                used by the host, docs/p2p-nat.md)

Host process (trio + libp2p): the :mod:`psyche.p2p.host` package, which nothing here imports;
its docstring lists its modules.
"""

from psyche.p2p.errors import (
    AnnouncementError,
    BlobNotFound,
    BlobTooLarge,
    FetchError,
    FetchTimeout,
    NodeStopped,
    P2PError,
)
from psyche.p2p.node import P2PNode
from psyche.p2p.peer_id import peer_id_for, public_key_for, show_identity
from psyche.p2p.transport import FetchResult, Transport

__all__ = [
    "AnnouncementError",
    "BlobNotFound",
    "BlobTooLarge",
    "FetchError",
    "FetchResult",
    "FetchTimeout",
    "NodeStopped",
    "P2PError",
    "P2PNode",
    "Transport",
    "peer_id_for",
    "public_key_for",
    "show_identity",
]
