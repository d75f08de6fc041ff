"""The daemon's P2P node: an asyncio facade over a libp2p host running in a child process.

Process boundary. The daemon runs asyncio plus a training thread that holds the GIL for long
stretches; py-libp2p is pure-Python trio and, in that process, starves (docs/p2p-nat.md,
"The libp2p host process"). So :meth:`P2PNode.start` spawns ``python -m psyche.p2p.host`` (via
:mod:`psyche.p2p.process`) and talks to it over a Unix socket pair with small msgspec frames
(:mod:`psyche.p2p.control`). This side never imports trio or libp2p. Blobs cross the boundary as
files in a directory both processes use (a fresh one under ``/dev/shm`` when it exists, so handing
over a payload is a memory copy): :meth:`P2PNode.serve` writes a file and registers it, a fetch
leaves a verified file that this side reads. The child exits when told to, when its control socket
reaches EOF (this process died), or via ``PR_SET_PDEATHSIG`` when the thread that started it dies —
so start the node from the thread that runs the event loop for the node's whole life, as asyncio
programs normally do. Starting takes seconds (importing py-libp2p alone does); start it early.

What the node guarantees to the daemon:

* gossip (:meth:`announce`, :meth:`announcements`) is limited to
  :data:`~psyche.p2p.messages.MAX_ANNOUNCEMENT` bytes, and only messages whose libp2p-signed
  originator is in :meth:`set_allowed_peers` are delivered (deny by default; our own
  announcements are not echoed back). Decoding and signature checks of the content are
  :func:`psyche.p2p.messages.open_announcement`'s job;
* a blob is served only to allowed peers, fetched only from allowed peers, and
  :meth:`fetch` returns bytes only after checking ``sha256(bytes) == hash`` (BLAKE3 where the
  fetch says so, :mod:`psyche.p2p.digests`; the host already checked it while streaming;
  checking again here keeps the guarantee local). A fetched blob is served from then on, so
  later fetchers can get it from us instead of from its producer.

Behind a NAT (docs/p2p-nat.md): :meth:`reachability` says whether peers see us at an address we
do not have; :meth:`reserve` then holds circuit relay v2 reservations on reachable members and
returns the circuit addresses other members pass to :meth:`connect`, which dials them through
the relay. The host hole-punches relayed connections into direct ones where the NATs allow
(DCUtR), relays for members itself within fixed limits, and counts all of it in
:attr:`counters`.

A dropped gossip message is never silent: overflow of this side's queue and every drop in the
host are counted in :attr:`counters`. What the host refuses from peers (oversized or non-member
gossip, blobs with wrong bytes) is also counted by kind in ``counters.rejections`` and logged by
the host once per peer and kind (:mod:`psyche.p2p.rejections`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from types import TracebackType

import msgspec

from psyche.p2p.blob_files import SHM_MIN_FREE, default_blob_root, delete_off_loop, write_into_place
from psyche.p2p.control import (
    CancelFetch,
    Connect,
    Counters,
    Delivery,
    Fetch,
    FetchDone,
    HostMessage,
    Init,
    PeerReport,
    PeerStats,
    Publish,
    Reserve,
    Reserved,
    Serve,
    SetAllowedPeers,
    Tell,
    Unserve,
    blob_path,
)
from psyche.p2p.digests import Digest, digest_of
from psyche.p2p.errors import (
    AnnouncementError,
    FetchError,
    NodeStopped,
    P2PError,
)
from psyche.p2p.messages import MAX_ANNOUNCEMENT
from psyche.p2p.nat import Reachability
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.process import HostProcess
from psyche.p2p.transport import FetchResult, Transport
from psyche.protocol.identity import SecretKey

__all__ = ["SHM_MIN_FREE", "FetchResult", "P2PNode", "default_blob_root"]

log = logging.getLogger(__name__)

ANNOUNCEMENT_QUEUE = 4096
"""Deliveries buffered for :meth:`P2PNode.announcements`; beyond this the oldest are dropped."""

RECYCLED = ".recycled"
"""The blob directory's subdirectory of withdrawn files kept for reuse (:meth:`P2PNode.unserve`
with ``recycle``); its files are never served."""


class P2PNode(Transport):
    """One libp2p node (gossip + blobs) for one run. Use ``async with`` or start/stop."""

    def __init__(self) -> None:
        self._host = HostProcess(self._on_message, self._on_close)
        self._started = False
        self._deliveries: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()
        self._dropped = 0
        self._stats: PeerStats | None = None
        self._stats_changed = asyncio.Event()
        self._served: dict[bytes, Path] = {}
        self._askers: dict[bytes, set[str]] = {}
        self._fetching: Counter[bytes] = Counter()
        """Fetches in flight per blob: the host writes every one into the same file."""
        self._blob_dir: Path | None = None
        self._own_blob_dir = False
        self._peer_id = ""
        self._listen_addrs: list[str] = []

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(
        self,
        secret_key: SecretKey,
        *,
        run_id: str,
        listen_port: int = 0,
        listen_host: str = "127.0.0.1",
        blob_dir: str | os.PathLike[str] | None = None,
        blob_root: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        """Spawn the host, listen on ``listen_host:listen_port`` (0: any free port), join the
        run's gossip topic; returns once the host is listening. Blobs live in ``blob_dir``, or
        by default in a new directory of this node's under ``blob_root`` (default:
        :func:`default_blob_root`), removed again by :meth:`stop`."""
        if self._started:
            raise P2PError("this node was already started")
        self._started = True
        if blob_dir is None:
            root = blob_root if blob_root is not None else default_blob_root()
            self._blob_dir = Path(tempfile.mkdtemp(prefix="psyche-p2p-", dir=root))
            self._own_blob_dir = True
        else:
            self._blob_dir = Path(blob_dir)
            self._blob_dir.mkdir(parents=True, exist_ok=True)
        init = Init(
            secret_key=secret_key.to_bytes(),
            run_id=run_id,
            listen_host=listen_host,
            listen_port=listen_port,
            blob_dir=str(self._blob_dir),
            owns_blob_dir=self._own_blob_dir,
            log_level=logging.getLogger("psyche.p2p").getEffectiveLevel(),
        )
        try:
            ready = await self._host.spawn(init, startup_timeout)
        except BaseException:
            await self.stop()
            raise
        if ready.peer_id != peer_id_for(secret_key.public_key()):
            # The whole sender check rests on this equality; never run without it.
            await self.stop()
            raise P2PError(f"host peer id {ready.peer_id} is not derived from our key")
        self._peer_id = ready.peer_id
        self._listen_addrs = list(ready.listen_addrs)

    async def stop(self) -> None:
        """Stop the host (asking first, killing after a few seconds) and clean up."""
        await self._host.stop()
        if self._own_blob_dir and self._blob_dir is not None:
            shutil.rmtree(self._blob_dir, ignore_errors=True)

    async def __aenter__(self) -> P2PNode:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ---- identity and state ------------------------------------------------------------------

    @property
    def peer_id(self) -> str:
        return self._peer_id

    @property
    def listen_addrs(self) -> list[str]:
        """Dialable multiaddrs ending in ``/p2p/<peer_id>``, for other nodes' :meth:`connect`."""
        return list(self._listen_addrs)

    @property
    def pid(self) -> int:
        """Process id of the libp2p host child."""
        return self._host.pid

    @property
    def spool_dir(self) -> Path | None:
        return self._blob_dir  # None until started

    @property
    def recycle_dir(self) -> Path | None:
        return None if self._blob_dir is None else self._blob_dir / RECYCLED

    @property
    def blob_dir(self) -> Path:
        if self._blob_dir is None:
            raise NodeStopped("the p2p node is not started")
        return self._blob_dir

    def memory_rss(self) -> int:
        """Resident memory of the host process in bytes (from ``/proc``)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise NodeStopped("the p2p host process has exited")

    def direct_peers(self) -> set[str]:
        return {p for p, r in self.peer_stats().items() if r.connected and not r.relayed}

    def peer_stats(self) -> dict[str, PeerReport]:
        """The host's latest per-peer measurements (refreshed about once a second)."""
        return {p.peer_id: p for p in self._stats.peers} if self._stats else {}

    @property
    def counters(self) -> Counters:
        """Host totals, with drops from this side's announcement queue added."""
        c = self._stats.counters if self._stats else Counters()
        return msgspec.structs.replace(
            c, dropped_overflow=c.dropped_overflow + self._dropped, rejections=dict(c.rejections)
        )

    def observed_addrs(self) -> list[str]:
        """Where peers on direct connections see us (identify's observed addresses, as of the
        host's last report, about a second old). Relayed connections are not counted: they
        show the relay's end of the circuit, not us."""
        return list(self._stats.observed_addrs) if self._stats else []

    def reachability(self) -> Reachability:
        """``"private"`` when a peer sees us at an IP that is none of ours (we are behind a
        NAT: reserve on relays), ``"public"`` when every peer sees one of our IPs,
        ``"unknown"`` before any peer has told us (:func:`psyche.p2p.nat.reachability`).
        Cheap: read from the host's last report, never a round trip."""
        return self._stats.reachability if self._stats else "unknown"

    @property
    def circuit_addrs(self) -> list[str]:
        """Our circuit addresses through the relays that hold a live reservation for us now
        (the last :meth:`reserve` reply, kept current by the host's reports)."""
        return list(self._stats.circuit_addrs) if self._stats else []

    def gossip_peers(self) -> list[str]:
        """Peers subscribed to this run's topic (as of the last host report)."""
        return list(self._stats.gossip_peers) if self._stats else []

    async def wait_for_gossip_peers(self, n: int, timeout: float) -> None:
        """Wait until at least ``n`` peers share the run's topic (``TimeoutError`` otherwise)."""
        async with asyncio.timeout(timeout):
            while len(self.gossip_peers()) < n:
                if self._host.closed:
                    raise NodeStopped("the p2p node is not running")
                self._stats_changed.clear()
                await self._stats_changed.wait()

    # ---- peers and gossip --------------------------------------------------------------------

    async def connect(self, addrs: Sequence[str]) -> list[str]:
        """Dial ``/…/p2p/<peer id>`` addresses; the host keeps redialling them when dropped.

        A circuit address (``/…/p2p/<relay id>/p2p-circuit/p2p/<peer id>``, from the peer's
        :meth:`reserve`) is dialled through that relay, after the peer's direct addresses have
        had a second to connect.

        Returns the errors of the first attempt (empty when every dial worked); peers that
        failed are retried in the background, so an error here is not fatal.
        """
        ack = await self._host.request(lambda req_id: Connect(req_id, list(addrs)))
        return ack.error.split("; ") if ack.error else []

    async def reserve(self, relay_addrs: Sequence[str]) -> list[str]:
        """Hold circuit relay v2 reservations on these relays and return our circuit addresses.

        ``relay_addrs`` are the relays' direct addresses, each ending in ``/p2p/<relay id>``
        (several addresses of one relay make one reservation). The set replaces the previous
        one: relays left out are no longer renewed (their reservation lapses), and ``[]``
        drops them all. The host renews each reservation at half its life, remakes it when the
        connection to the relay comes back, and retries a relay that refused every 10 s.

        Returns ``<relay addr>/p2p-circuit/p2p/<our peer id>`` for every given address of every
        relay that accepted now (refusals are logged by the host); other nodes pass these to
        :meth:`connect`. A relay only accepts members of its run, within its limits
        (:class:`psyche.p2p.nat.RelayLimits`).
        """
        reply: Reserved = await self._host.request(
            lambda req_id: Reserve(req_id, list(relay_addrs))
        )
        for error in reply.errors:
            log.warning("relay reservation: %s", error)
        return list(reply.circuit_addrs)

    def set_allowed_peers(self, peer_ids: Iterable[str]) -> None:
        """Replace the set of peers we exchange gossip and blobs with (the epoch's clients)."""
        self._host.send(SetAllowedPeers(sorted(set(peer_ids))))

    async def announce(self, data: bytes) -> None:
        """Publish ``data`` (at most 4096 bytes) on the run's gossip topic."""
        if len(data) > MAX_ANNOUNCEMENT:
            raise AnnouncementError(f"announcement of {len(data)} bytes exceeds 4096")
        ack = await self._host.request(lambda req_id: Publish(req_id, bytes(data)))
        if ack.error:
            raise P2PError(ack.error)

    async def tell(self, peers: Iterable[str], data: bytes) -> None:
        """Over ``/psyche/tell/1`` (:mod:`psyche.p2p.host.direct`); the host counts the sends."""
        if len(data) > MAX_ANNOUNCEMENT:
            raise AnnouncementError(f"announcement of {len(data)} bytes exceeds 4096")
        self._host.send(Tell(sorted(set(peers)), bytes(data)))

    async def announcements(self) -> AsyncIterator[tuple[str, bytes]]:
        """``(peer_id, data)`` for each gossip message from an allowed peer, until stop.

        One consumer only: every message is handed out once.
        """
        while True:
            item = await self._deliveries.get()
            if item is None:
                self._deliveries.put_nowait(None)  # let a later call end as well
                return
            yield item

    # ---- blobs -------------------------------------------------------------------------------

    def serve(self, blob: bytes, *, handoff: bool = True, report_askers: bool = False) -> bytes:
        """Serve ``blob`` to allowed peers; returns its id, ``sha256(blob)``. ``handoff=False``
        for blobs fetchers ask of this peer by name (see
        :class:`~psyche.p2p.host.blobs.BlobServer`); ``report_askers``: keep :meth:`askers`."""
        blob_hash = hashlib.sha256(blob).digest()
        path = blob_path(self.blob_dir, blob_hash)
        write_into_place(path, blob)
        if report_askers:
            self._askers[blob_hash] = set()
        self._register(blob_hash, path, len(blob), handoff=handoff, report_askers=report_askers)
        return blob_hash

    def askers(self, blob_hash: bytes) -> frozenset[str]:
        """The peers that have asked for ``blob_hash``, served with ``report_askers``, as the
        host last reported (about once a second)."""
        return frozenset(self._askers.get(bytes(blob_hash), ()))

    async def serve_known(self, blob: bytes, blob_hash: bytes, *, handoff: bool = True) -> None:
        # A SparseLoCo trainer's audit states are 12 bytes per parameter each: written on the
        # loop they held up gossip and downloads for about 0.1 s per 14 MB on a loaded disk.
        path = blob_path(self.blob_dir, bytes(blob_hash))
        await asyncio.to_thread(write_into_place, path, blob)
        self._register(bytes(blob_hash), path, len(blob), handoff=handoff)

    def serve_file(
        self,
        path: str | os.PathLike[str],
        *,
        blob_hash: bytes,
        size: int,
        handoff: bool = True,
    ) -> None:
        """Serve an existing file (not copied) whose hash the caller vouches for; a file in
        :attr:`blob_dir` is deleted when it is unserved.

        Fetchers verify the hash anyway, so a wrong ``blob_hash`` only wastes their time.
        """
        self._register(bytes(blob_hash), Path(path), size, handoff=handoff)

    def unserve(self, blob_hash: bytes, *, recycle: bool = False) -> None:
        """Stop serving ``blob_hash``; its file is deleted if it lives in the blob dir, or with
        ``recycle`` moved into :attr:`recycle_dir` for its owner to write over."""
        path = self._served.pop(blob_hash, None)
        self._askers.pop(blob_hash, None)
        self._host.send(Unserve(blob_hash))
        if path is None or path.parent != self.blob_dir:
            return
        if recycle:
            try:
                (self.blob_dir / RECYCLED).mkdir(exist_ok=True)
                path.rename(self.blob_dir / RECYCLED / path.name)
                return
            except OSError:
                pass  # deleted instead, as without recycle
        delete_off_loop(path)

    def served(self) -> list[bytes]:
        return list(self._served)

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
        blob_hash = bytes(blob_hash)
        if (local := self._served.get(blob_hash)) is not None:
            data = await asyncio.to_thread(local.read_bytes)
            if digest_of(data, digest) == blob_hash:
                return FetchResult(data, self.peer_id, 0.0, [])
        peers = [p for p in dict.fromkeys(from_any_of) if p != self.peer_id]
        attempt_timeout = min(attempt_timeout, timeout)
        self._fetching[blob_hash] += 1
        try:
            done = await self._fetch_one(
                blob_hash, max_size, peers, timeout, attempt_timeout, digest
            )
            return await self._received(done, blob_hash, digest, reshare=reshare)
        finally:
            self._fetching[blob_hash] -= 1
            if not self._fetching[blob_hash]:
                del self._fetching[blob_hash]

    async def _fetch_one(
        self,
        blob_hash: bytes,
        max_size: int,
        peers: list[str],
        timeout: float,
        attempt_timeout: float,
        digest: Digest,
    ) -> FetchDone:
        req_id = self._host.next_id()
        msg = Fetch(req_id, blob_hash, max_size, peers, timeout, attempt_timeout, digest)
        try:
            # The host enforces ``timeout``; the margin only covers a wedged host.
            done: FetchDone = await self._host.request(
                lambda _: msg, req_id, timeout=timeout + 10.0
            )
        except asyncio.CancelledError:
            with contextlib.suppress(P2PError):
                self._host.send(CancelFetch(req_id))
            raise
        return done

    async def _received(
        self, done: FetchDone, blob_hash: bytes, digest: Digest, *, reshare: bool
    ) -> FetchResult:
        if done.path is None or done.from_peer is None:
            raise done.failed(blob_hash)
        path = Path(done.path)
        data = await asyncio.to_thread(path.read_bytes)
        if digest_of(data, digest) != blob_hash:
            raise FetchError(f"host returned blob {blob_hash.hex()[:16]} with the wrong hash")
        if reshare:
            self._register(blob_hash, path, len(data))
        elif blob_hash not in self._served and self._fetching[blob_hash] == 1:
            # Not kept: served by nobody here, and no other fetch of it is about to read it.
            delete_off_loop(path)
        failures = [(f.peer, f.reason) for f in done.failures]
        return FetchResult(data, done.from_peer, done.seconds, failures)

    # ---- plumbing ----------------------------------------------------------------------------

    def _register(
        self,
        blob_hash: bytes,
        path: Path,
        size: int,
        *,
        handoff: bool = True,
        report_askers: bool = False,
    ) -> None:
        self._served[blob_hash] = path
        self._host.send(Serve(blob_hash, str(path), size, handoff, report_askers))

    def _on_message(self, msg: HostMessage) -> None:
        if isinstance(msg, Delivery):
            if self._deliveries.qsize() >= ANNOUNCEMENT_QUEUE:
                self._deliveries.get_nowait()
                self._dropped += 1
                log.warning("announcements are not being consumed; dropped the oldest")
            self._deliveries.put_nowait((msg.from_peer, msg.data))
        elif isinstance(msg, PeerStats):
            for asked in msg.asked:
                if (askers := self._askers.get(asked.blob_hash)) is not None:
                    askers.update(asked.peers)
            self._stats = msg
            self._stats_changed.set()

    def _on_close(self) -> None:
        self._deliveries.put_nowait(None)
        self._stats_changed.set()
