"""The seam between the client's round engine and the peer-to-peer network.

The engine and model sharing need only what this protocol lists: gossip (announce and receive
signed announcements), content-addressed blobs (serve and fetch by SHA-256), peer bookkeeping,
and NAT traversal (whether we are reachable, and relay reservations; docs/p2p-nat.md).
:class:`~psyche.p2p.node.P2PNode` implements it over libp2p in a child process;
:class:`~psyche.p2p.memory.MemoryTransport` implements it in memory for the simulated run
(``psyche demo``) and for tests that must run many clients in one event loop.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from psyche.p2p.control import Counters
from psyche.p2p.digests import Digest
from psyche.p2p.nat import Reachability

__all__ = ["FetchResult", "Transport"]


@dataclass(frozen=True, slots=True)
class FetchResult:
    data: bytes
    """The blob; its hash (SHA-256, or the fetch's ``digest``) equals the requested one."""
    from_peer: str
    seconds: float
    failures: list[tuple[str, str]]
    """``(peer, reason)`` of every attempt that failed before the one that worked."""


class Transport(Protocol):
    """Implementations subclass it, so :meth:`fetch` is written once."""

    @property
    def peer_id(self) -> str: ...

    @property
    def listen_addrs(self) -> list[str]: ...

    @property
    def counters(self) -> Counters:
        """Running totals, including what the transport refused from peers by kind."""
        ...

    async def connect(self, addrs: Sequence[str]) -> list[str]:
        """Dial peers; returns the errors of the first attempt (retried in the background)."""
        ...

    def set_allowed_peers(self, peer_ids: Iterable[str]) -> None:
        """The peers gossip and blobs are exchanged with (the epoch's clients)."""
        ...

    def reachability(self) -> Reachability:
        """``"private"`` when peers see us at an address we do not have (behind a NAT),
        ``"public"`` when they see one of ours, ``"unknown"`` until told. Non-blocking."""
        ...

    def observed_addrs(self) -> list[str]:
        """The addresses peers on direct connections observe us at."""
        ...

    def direct_peers(self) -> set[str]:
        """Peers we hold a direct (not relayed) connection to now. Non-blocking."""
        ...

    async def reserve(self, relay_addrs: Sequence[str]) -> list[str]:
        """Hold relay reservations on these relays (``…/p2p/<relay id>``; replaces the previous
        set) and return our circuit addresses through those that accepted, for :meth:`connect`."""
        ...

    async def announce(self, data: bytes) -> None: ...

    async def tell(self, peers: Iterable[str], data: bytes) -> None:
        """Send ``data``, a signed announcement, straight to each of ``peers`` (members), not
        through gossip; best effort, no reply. Receivers get it from :meth:`announcements` as
        if gossiped by this peer."""
        ...

    def announcements(self) -> AsyncIterator[tuple[str, bytes]]:
        """``(peer_id, data)`` per gossip message from an allowed peer; one consumer only."""
        ...

    def serve(self, blob: bytes, *, handoff: bool = True, report_askers: bool = False) -> bytes:
        """Serve ``blob``; returns its SHA-256. ``handoff=False``: never turn fetchers away to
        other holders (for blobs fetchers ask of this peer by name). ``report_askers``: keep
        :meth:`askers` for it (this client's own announced payloads)."""
        ...

    def askers(self, blob_hash: bytes) -> frozenset[str]:
        """The peers known to have asked for ``blob_hash`` (served with ``report_askers``):
        they have heard its announcement, the only place a blob is named. Empty where unknown."""
        ...

    async def serve_known(self, blob: bytes, blob_hash: bytes, *, handoff: bool = True) -> None:
        """:meth:`serve` for a ``blob`` whose SHA-256 the caller already has (fetchers verify it
        anyway, so a wrong one only wastes their time), without holding up the event loop while
        it is stored: for large blobs made in a worker thread."""
        ...

    def serve_file(
        self,
        path: str | os.PathLike[str],
        *,
        blob_hash: bytes,
        size: int,
        handoff: bool = True,
    ) -> None:
        """Serve an existing file by a hash the caller vouches for; a file in
        :attr:`spool_dir` becomes the transport's, deleted when it is unserved."""
        ...

    @property
    def spool_dir(self) -> Path | None:
        """Where a caller may write files for :meth:`serve_file` to serve without a copy
        (the blob directory); None where blobs are not kept in files."""
        ...

    @property
    def recycle_dir(self) -> Path | None:
        """Where :meth:`unserve` with ``recycle`` moves a withdrawn file of :attr:`spool_dir`,
        for its owner to write over instead of making a new one (``psyche.training.
        audit_files``: how it stays safe while an upload still reads it); None without files."""
        ...

    def served(self) -> list[bytes]:
        """The blobs served now."""
        ...

    def unserve(self, blob_hash: bytes, *, recycle: bool = False) -> None:
        """Stop serving ``blob_hash``; a file of :attr:`spool_dir` is deleted, or with
        ``recycle`` moved into :attr:`recycle_dir`."""
        ...

    async def fetch(
        self,
        blob_hash: bytes,
        *,
        from_any_of: Sequence[str],
        max_size: int,
        timeout: float = 600.0,
        attempt_timeout: float = 10.0,
        digest: Digest = Digest.sha256,
        reshare: bool = True,
    ) -> bytes:
        """The blob with this SHA-256 (or ``digest``), from the best of ``from_any_of`` that has
        it. With ``reshare`` (the default) this client serves the blob from then on, until
        :meth:`unserve`; without, nothing of it is kept.

        Raises :class:`~psyche.p2p.errors.FetchError` (too large, not found, timeout) when no
        peer delivers a verified copy within ``timeout`` seconds.
        """
        result = await self.fetch_detailed(
            blob_hash,
            from_any_of=from_any_of,
            max_size=max_size,
            timeout=timeout,
            attempt_timeout=attempt_timeout,
            digest=digest,
            reshare=reshare,
        )
        return result.data

    async def fetch_detailed(
        self,
        blob_hash: bytes,
        *,
        from_any_of: Sequence[str],
        max_size: int,
        timeout: float = 600.0,
        attempt_timeout: float = 10.0,
        digest: Digest = Digest.sha256,
        reshare: bool = True,
    ) -> FetchResult:
        """:meth:`fetch`, also saying which peer delivered and which attempts failed."""
        ...
