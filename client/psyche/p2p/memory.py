"""An in-memory stand-in for the libp2p network, for runs of many clients in one event loop.

Named as what it is: nothing here crosses a socket. It keeps the rules the round engine relies
on from the real host: gossip reaches only peers that allow the sender (and never the sender
itself), a blob is fetched by its SHA-256 from a peer that serves it and is checked against
that hash; a fetch of a blob nobody serves fails at once. ``psyche demo`` and the engine's
tests run on it; the real network is :class:`~psyche.p2p.node.P2PNode`.

Every node is reachable, so there is no NAT: :meth:`MemoryTransport.reachability` is
``"public"`` and :meth:`MemoryTransport.reserve` holds nothing and returns no circuit address.

A test can give a node a bad link: with ``stall_fetches`` every download of that node stalls
until its timeout; with ``lose_first_copy`` each distinct gossip message reaches it only when
it is sent a second time (what a peer connected after a message's gossip window sees).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

from psyche.p2p.control import Counters
from psyche.p2p.digests import Digest, digest_of
from psyche.p2p.errors import BlobNotFound, BlobTooLarge, FetchTimeout
from psyche.p2p.nat import Reachability
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.transport import FetchResult, Transport
from psyche.protocol.identity import SecretKey

__all__ = ["MemoryNetwork", "MemoryTransport"]

_STOP = None


class MemoryNetwork:
    """The nodes of one simulated network, by peer id."""

    def __init__(self) -> None:
        self.nodes: dict[str, MemoryTransport] = {}

    def node(self, key: SecretKey) -> MemoryTransport:
        """A node for ``key`` (the same peer id libp2p derives from it); a node that was
        stopped is replaced, as a restarted process would be."""
        node = MemoryTransport(self, peer_id_for(key.public_key()))
        self.nodes[node.peer_id] = node
        return node

    def quiet(self) -> bool:
        """No gossip is waiting to be consumed anywhere."""
        return all(n._queue.empty() for n in self.nodes.values())


class MemoryTransport(Transport):
    """One client's view of a :class:`MemoryNetwork`; implements :class:`Transport`."""

    def __init__(self, network: MemoryNetwork, peer_id: str) -> None:
        self._network = network
        self._peer_id = peer_id
        self._allowed: frozenset[str] = frozenset()
        self._queue: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()
        self._blobs: dict[bytes, bytes] = {}
        self._askers: dict[bytes, set[str]] = {}
        self.stall_fetches = False
        """Every download of this node stalls until its timeout (a bad link)."""
        self.lose_first_copy = False
        """Each distinct gossip message is lost the first time it is sent to this node."""
        self._lost: set[tuple[str, bytes]] = set()
        self.deaf_to_gossip = False
        """No gossip reaches this node at all (a host left out of every mesh); messages sent
        to it directly (:meth:`tell`) still do."""
        self.told = 0
        self.online = True
        self.published = 0
        self.delivered = 0

    @property
    def peer_id(self) -> str:
        return self._peer_id

    @property
    def listen_addrs(self) -> list[str]:
        return [f"/memory/p2p/{self._peer_id}"]

    @property
    def counters(self) -> Counters:
        return Counters(published=self.published, delivered=self.delivered, told=self.told)

    async def connect(self, addrs: Sequence[str]) -> list[str]:
        return []  # every node of the network is reachable

    def set_allowed_peers(self, peer_ids: Iterable[str]) -> None:
        self._allowed = frozenset(peer_ids)

    def reachability(self) -> Reachability:
        return "public"

    def observed_addrs(self) -> list[str]:
        return []

    def direct_peers(self) -> set[str]:
        return set(self._allowed - {self._peer_id})  # every node of the network is reachable

    async def reserve(self, relay_addrs: Sequence[str]) -> list[str]:
        return []  # nobody is behind a NAT here, so nobody needs a relay

    async def announce(self, data: bytes) -> None:
        if not self.online:
            return
        self.published += 1
        for node in list(self._network.nodes.values()):
            if node is not self and node.online and self._peer_id in node._allowed:
                if node.deaf_to_gossip:
                    continue
                if node.lose_first_copy and (self._peer_id, bytes(data)) not in node._lost:
                    node._lost.add((self._peer_id, bytes(data)))
                    continue
                node._put(self._peer_id, data)

    async def tell(self, peers: Iterable[str], data: bytes) -> None:
        if not self.online:
            return
        for peer in set(peers):
            node = self._network.nodes.get(peer)
            if node is None or node is self or not node.online:
                continue
            if self._peer_id in node._allowed:
                self.told += 1
                node._put(self._peer_id, data)

    def _put(self, origin: str, data: bytes) -> None:
        self.delivered += 1
        self._queue.put_nowait((origin, bytes(data)))

    async def announcements(self) -> AsyncIterator[tuple[str, bytes]]:
        while True:
            item = await self._queue.get()
            if item is _STOP:
                return
            yield item

    def serve(self, blob: bytes, *, handoff: bool = True, report_askers: bool = False) -> bytes:
        digest = hashlib.sha256(blob).digest()
        self._blobs[digest] = bytes(blob)
        if report_askers:
            self._askers[digest] = set()
        return digest

    def askers(self, blob_hash: bytes) -> frozenset[str]:
        return frozenset(self._askers.get(bytes(blob_hash), ()))

    async def serve_known(self, blob: bytes, blob_hash: bytes, *, handoff: bool = True) -> None:
        self._blobs[bytes(blob_hash)] = bytes(blob)

    def serve_file(
        self,
        path: str | os.PathLike[str],
        *,
        blob_hash: bytes,
        size: int,
        handoff: bool = True,
    ) -> None:
        self._blobs[bytes(blob_hash)] = Path(path).read_bytes()[:size]

    @property
    def spool_dir(self) -> Path | None:
        return None  # blobs live in memory here

    @property
    def recycle_dir(self) -> Path | None:
        return None

    def unserve(self, blob_hash: bytes, *, recycle: bool = False) -> None:
        del recycle  # no files here
        self._blobs.pop(bytes(blob_hash), None)
        self._askers.pop(bytes(blob_hash), None)

    def served(self) -> list[bytes]:
        return list(self._blobs)

    def stop(self) -> None:
        self.online = False
        self._queue.put_nowait(_STOP)

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
        blob_hash = bytes(blob_hash)
        if (own := self._blobs.get(blob_hash)) is not None:
            return FetchResult(own, self._peer_id, 0.0, [])
        if self.stall_fetches:
            await asyncio.sleep(timeout)
            raise FetchTimeout(f"fetch of blob {blob_hash.hex()[:16]} timed out", [])
        failures: list[tuple[str, str]] = []
        for peer in dict.fromkeys(from_any_of):
            node = self._network.nodes.get(peer)
            data = None if node is None or not node.online else node._blobs.get(blob_hash)
            if (
                node is not None
                and data is not None
                and self.online
                and self._peer_id in node._allowed
            ):
                # An allowed peer asked, as the real host counts it.
                node._askers.get(blob_hash, set()).add(self._peer_id)
            if data is None or not self.online or peer not in self._allowed:
                failures.append((peer, "not found"))
                continue
            if len(data) > max_size:
                raise BlobTooLarge(f"blob of {len(data)} bytes exceeds {max_size}", failures)
            assert digest_of(data, digest) == blob_hash
            if reshare:
                self._blobs.setdefault(blob_hash, data)  # re-served, as the real host does
            return FetchResult(data, peer, 0.0, failures)
        raise BlobNotFound(f"no peer has blob {blob_hash.hex()[:16]}", failures)
