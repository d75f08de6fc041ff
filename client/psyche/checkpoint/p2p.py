"""Sharing the model with joining clients over P2P, and fetching it.

See docs/protocol.md, "Warmup", "Cooldown" and "P2P model sharing".

Serving (:class:`SnapshotServer`): after a cooldown a client serves a :class:`~.manifest.Snapshot`
as blobs through the ordinary blob protocol (which answers only the epoch's peers, refuses
oversize requests and caps concurrent uploads) and announces ``ModelAvailable{step,
manifest_hash, manifest_size}`` on gossip while the next epoch warms up.

Trust (written down in docs/protocol.md): a joiner counts the offers of the *previous epoch's*
clients only (the members it saw at that epoch's end; if it did not watch that epoch, the
current epoch's other clients) and accepts the manifest hash that a strict majority of the
offers it received name (:func:`choose_offer`). Honest peers hold bit-identical weights and so
announce the same hash; a minority cannot steer the joiner. Everything after that is content
addressed: each piece must hash to what the manifest says, then each tensor's bytes, shape and
dtype are checked, and the rebuilt model's :func:`model_hash` must equal the manifest's.

Fetching (:func:`fetch_snapshot`): the manifest from any agreeing peer, then the pieces in
parallel — at most ``max_concurrent`` requests at once, each to one peer with a per-request
timeout, spread over the least-busy peers; a failed request is retried on another peer, and a
peer that fails ``max_peer_errors`` times is dropped. If every peer is dropped the load fails
with :class:`PeerFetchError` ("peers unreachable"), as in the reference.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import torch

from psyche.checkpoint.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestError,
    Snapshot,
    decode_manifest,
    tensors_from_stream,
)
from psyche.p2p.errors import FetchError
from psyche.p2p.messages import ModelAvailable
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.transport import Transport

__all__ = [
    "Choice",
    "PeerFetchError",
    "PeerPool",
    "ReceivedModel",
    "SnapshotServer",
    "choose_offer",
    "fetch_snapshot",
]

log = logging.getLogger(__name__)


class PeerFetchError(Exception):
    """The model could not be fetched from peers (no agreement, bad data, peers unreachable)."""


class SnapshotServer:
    """Serves at most one snapshot at a time through ``node``."""

    def __init__(self, node: Transport) -> None:
        self.node = node
        self.snapshot: Snapshot | None = None
        self._blobs: list[bytes] = []
        self._nonce = 0

    def share(self, snapshot: Snapshot) -> None:
        self.clear()
        # No handoff: a joiner asks one holder per request (PeerPool), so a holder turning it
        # away for a while would only delay it; holders share the load by piece instead.
        blobs = [self.node.serve(snapshot.manifest_bytes, handoff=False)]
        blobs += [self.node.serve(p, handoff=False) for p in snapshot.pieces]
        blobs += [self.node.serve(f, handoff=False) for f in snapshot.files.values()]
        self.snapshot, self._blobs = snapshot, blobs

    def clear(self) -> None:
        for h in self._blobs:
            self.node.unserve(h)
        self.snapshot, self._blobs = None, []

    def blobs(self) -> list[bytes]:
        """Hashes of every blob served for the current snapshot."""
        return list(self._blobs)

    def offer(self, step: int) -> ModelAvailable | None:
        """The announcement for ``step``, if the snapshot held is that step's."""
        s = self.snapshot
        if s is None or s.manifest.step != step:
            return None
        self._nonce = (self._nonce + 1) % 2**32
        return ModelAvailable(
            step=step,
            manifest_hash=s.manifest_hash,
            manifest_size=len(s.manifest_bytes),
            nonce=self._nonce,
        )


@dataclass(frozen=True, slots=True)
class Choice:
    manifest_hash: bytes
    manifest_size: int
    peers: list[bytes]
    """P2P keys of the clients that offered this manifest."""
    votes: int
    answers: int


def choose_offer(
    offers: Mapping[bytes, ModelAvailable], trusted: Collection[bytes], step: int
) -> Choice:
    """The manifest a strict majority of the trusted peers' offers for ``step`` name."""
    valid = {k: o for k, o in offers.items() if k in trusted and o.step == step}
    if not valid:
        raise PeerFetchError(f"no previous-epoch peer offered the model of step {step}")
    tally = Counter((o.manifest_hash, o.manifest_size) for o in valid.values())
    (best, size), votes = tally.most_common(1)[0]
    if 2 * votes <= len(valid):
        raise PeerFetchError(
            f"previous-epoch peers disagree on the model of step {step}: "
            f"{len(tally)} different manifests among {len(valid)} offers, none has a majority"
        )
    if size > MAX_MANIFEST_BYTES:
        raise PeerFetchError(f"offered manifest of {size} bytes exceeds {MAX_MANIFEST_BYTES}")
    peers = sorted(k for k, o in valid.items() if o.manifest_hash == best)
    return Choice(best, size, peers, votes, len(valid))


PER_PEER_REQUESTS = 2
"""Piece requests in flight per offering peer, at most (see :func:`fetch_snapshot`)."""


@dataclass
class PeerPool:
    """Which peer to ask next: the least busy live one; dropped after ``max_errors`` failures."""

    peers: list[str]
    max_errors: int = 5
    in_flight: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    served: Counter[str] = field(default_factory=Counter)
    removed: set[str] = field(default_factory=set)
    _turn: int = 0

    def live(self) -> list[str]:
        return [p for p in self.peers if p not in self.removed]

    def pick(self, avoid: Collection[str] = ()) -> str | None:
        live = self.live()
        if not live:
            return None
        fresh = [p for p in live if p not in avoid] or live
        self._turn += 1
        n = len(self.peers)
        return min(
            fresh,
            key=lambda p: (
                self.in_flight[p],
                self.errors[p],
                (self.peers.index(p) - self._turn) % n,
            ),
        )

    def failed(self, peer: str, reason: str) -> None:
        self.errors[peer] += 1
        if self.errors[peer] >= self.max_errors and peer not in self.removed:
            self.removed.add(peer)
            log.warning(
                "dropping peer %s after %d errors (last: %s)", peer, self.errors[peer], reason
            )


@dataclass(frozen=True, slots=True)
class ReceivedModel:
    """A model fetched from peers and fully verified against its manifest."""

    manifest: Manifest
    manifest_hash: bytes
    tensors: dict[str, torch.Tensor]
    files: dict[str, bytes]
    sources: dict[str, int]
    """Peer id → pieces and files it delivered."""
    failures: dict[str, int]
    """Peer id → requests to it that failed (and were retried elsewhere)."""
    seconds: float


async def _fetch_one(
    node: Transport,
    pool: PeerPool,
    blob_hash: bytes,
    size: int,
    *,
    what: str,
    timeout: float,
) -> bytes:
    tried: set[str] = set()
    while True:
        peer = pool.pick(avoid=tried)
        if peer is None:
            raise PeerFetchError(f"peers unreachable: every peer failed while fetching {what}")
        tried.add(peer)
        pool.in_flight[peer] += 1
        try:
            res = await node.fetch_detailed(
                blob_hash,
                from_any_of=[peer],
                max_size=size,
                timeout=timeout,
                attempt_timeout=timeout,
            )
        except FetchError as e:
            log.info("%s from %s failed: %s; retrying elsewhere", what, peer, e)
            pool.failed(peer, str(e))
            continue
        finally:
            pool.in_flight[peer] -= 1
        if len(res.data) != size:
            pool.failed(peer, f"{what} has {len(res.data)} bytes, {size} expected")
            continue
        pool.served[res.from_peer] += 1
        return res.data


async def fetch_snapshot(
    node: Transport,
    choice: Choice,
    *,
    step: int,
    max_concurrent: int = 8,
    request_timeout: float = 30.0,
    max_peer_errors: int = 5,
    keep: Collection[bytes] = (),
) -> ReceivedModel:
    """Fetch and verify the manifest ``choice`` names and everything it lists."""
    t0 = time.perf_counter()
    pool = PeerPool([peer_id_for(k) for k in choice.peers], max_errors=max_peer_errors)

    def unserve(blob_hash: bytes) -> None:
        # A fetched blob is served from then on; this client serves its own copy after its
        # first cooldown instead (and keeps any blob it already served itself).
        if blob_hash not in keep:
            node.unserve(blob_hash)

    manifest = await _fetch_manifest(node, pool, choice, step=step, timeout=request_timeout)
    if manifest.total_bytes >= HOLE_PUNCH_MIN_BYTES:
        await _reach_directly(node, choice, timeout=request_timeout)
    # At most PER_PEER_REQUESTS requests per offering peer: more would split a peer's uplink
    # into slices too thin for the request timeout (a 20 Mbit/s home uplink serving four 8 MiB
    # pieces at once gives each 0.6 MB/s, and every piece timed out on the emulated internet).
    concurrent = max(1, min(max_concurrent, PER_PEER_REQUESTS * len(choice.peers)))
    stream, files = await _fetch_contents(
        node, pool, manifest, concurrent=concurrent, timeout=request_timeout, unserve=unserve
    )
    unserve(choice.manifest_hash)
    try:
        tensors = await asyncio.to_thread(tensors_from_stream, manifest, stream)
    except ManifestError as e:
        raise PeerFetchError(f"the received model does not match its manifest: {e}") from e
    return ReceivedModel(
        manifest=manifest,
        manifest_hash=choice.manifest_hash,
        tensors=tensors,
        files=files,
        sources=dict(pool.served),
        failures=dict(pool.errors),
        seconds=time.perf_counter() - t0,
    )


HOLE_PUNCH_WAIT_S = 5.0
"""How long a joiner waits for its connections to the offering peers to become direct before it
fetches the pieces (see :func:`_reach_directly`)."""

HOLE_PUNCH_MIN_BYTES = 64 << 20
"""Only for a model at least this large: a hole punch took 1.2–2.1 s on idle emulated links, and
a smaller model comes in from the directly held peers in about that time (the tiny preset's
4.7 MB in 2.0 s with or without the third peer; 5.8 s when it waited)."""


async def _reach_directly(node: Transport, choice: Choice, *, timeout: float) -> None:
    """Dial every offering peer not held directly while the links are still idle (each is asked
    for the small manifest), then wait up to ``HOLE_PUNCH_WAIT_S`` until every reachable one is
    held by a direct connection.

    A peer behind a NAT is first reached through a circuit relay, and the host hole-punches the
    connection (DCUtR) over that relayed one. Once pieces flow, the relay — itself a holder whose
    uplink the pieces fill — delays the hole punch's messages until they time out, and the NAT'd
    holder's pieces keep crossing the relay's uplink: on emulated 20 Mbit/s links a joiner fetched
    the medium model with two uplinks' worth of bandwidth instead of three (bench/internet.py:
    43.7 s against a 27.0 s bound, the hole punch succeeding a second after the last piece; 47.5 s
    when only the relayed peer's pieces were held back, its hole punch failing for 23 s behind
    the relay's own uploads)."""
    peers = [peer_id_for(k) for k in choice.peers]
    if set(peers) <= node.direct_peers():
        return
    unreachable: set[str] = set()

    async def touch(peer: str) -> None:
        try:
            await node.fetch_detailed(
                choice.manifest_hash,
                from_any_of=[peer],
                max_size=choice.manifest_size,
                timeout=timeout,
                attempt_timeout=timeout,
            )
        except FetchError as e:
            unreachable.add(peer)  # no connection to wait for; the pool retries it later
            log.info("could not reach %s before fetching the pieces: %s", peer, e)

    touching = [asyncio.create_task(touch(p)) for p in peers if p not in node.direct_peers()]
    deadline = time.monotonic() + HOLE_PUNCH_WAIT_S
    try:
        while time.monotonic() < deadline and set(peers) - node.direct_peers() - unreachable:
            await asyncio.sleep(0.2)
    finally:
        for t in touching:
            t.cancel()
        await asyncio.gather(*touching, return_exceptions=True)
    relayed = sorted(set(peers) - node.direct_peers() - unreachable)
    if relayed:
        log.info("fetching the pieces with %d peer(s) still relayed: %s", len(relayed), relayed)


async def _fetch_manifest(
    node: Transport, pool: PeerPool, choice: Choice, *, step: int, timeout: float
) -> Manifest:
    """The manifest ``choice`` names, from any agreeing peer, decoded and checked for ``step``."""
    data = await _fetch_one(
        node, pool, choice.manifest_hash, choice.manifest_size, what="the manifest", timeout=timeout
    )
    try:
        return decode_manifest(data, step=step)
    except ManifestError as e:
        raise PeerFetchError(f"the agreed manifest is invalid: {e}") from e


async def _fetch_contents(
    node: Transport,
    pool: PeerPool,
    manifest: Manifest,
    *,
    concurrent: int,
    timeout: float,
    unserve: Callable[[bytes], None],
) -> tuple[bytearray, dict[str, bytes]]:
    """Every piece (into the tensor stream) and file the manifest lists, at most ``concurrent``
    requests at once; each blob is ``unserve``-d once received. The first failure cancels the
    rest and is raised."""
    stream = bytearray(manifest.total_bytes)
    gate = asyncio.Semaphore(concurrent)
    files: dict[str, bytes] = {}

    async def piece(i: int) -> None:
        entry = manifest.pieces[i]
        async with gate:
            blob = await _fetch_one(
                node, pool, entry.sha256, entry.size, what=f"piece {i}", timeout=timeout
            )
        start = i * manifest.piece_size
        stream[start : start + len(blob)] = blob
        unserve(entry.sha256)

    async def file(name: str, sha: bytes, size: int) -> None:
        async with gate:
            files[name] = await _fetch_one(
                node, pool, sha, size, what=f"file {name}", timeout=timeout
            )
        unserve(sha)

    try:
        async with asyncio.TaskGroup() as tg:
            for i in range(len(manifest.pieces)):
                tg.create_task(piece(i))
            for f in manifest.files:
                tg.create_task(file(f.name, f.sha256, f.size))
    except* PeerFetchError as group:
        raise group.exceptions[0] from None
    return stream, files
