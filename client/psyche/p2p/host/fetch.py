"""Downloading a blob from whichever peers have it (host process, trio).

A download walks the candidate peers in :class:`~psyche.p2p.host.peers.PeerTable` order (measured
fast peers, then unmeasured, then peers that failed) and retries elsewhere on any failure. The
fetcher never trusts a server: the announced length must fit ``max_size``, bytes are hashed as
they arrive, and only a file whose SHA-256 equals the requested hash is renamed into place
(:func:`~psyche.p2p.control.blob_path`); partial files are always removed. A peer killed
mid-transfer looks like a clean EOF to py-libp2p and a frozen one is never detected
(docs/p2p-nat.md, "The libp2p host process"), hence the explicit length and a deadline on every
attempt.

A server handing a blob off answers ``BUSY`` naming the peers it uploaded it to: the fetcher
asks those next, in its own random order (and first in later passes) and asks the server that
named them last, so a producer is asked again only once nobody else served the copy
(docs/protocol.md, "Blobs"). After a ``BUSY`` answer the rest of the pass asks only the peers
it named and the next pass only the known holders (the first peer named, the caller's
announcer, and the peers named since): walking every peer, most of which lack the blob, made
a fetch's requests grow with the run. Names only reorder the candidates; every copy is
hash-checked whoever is named.

Peers that sent a wrong hash, announced an oversize blob or refused us are excluded for the rest
of that fetch; peers that were busy, did not have the blob yet, were slow or unreachable are
asked again in later passes (with backoff) until the overall deadline, since a peer still
downloading a payload will have it soon. Only bad links and dishonest peers lose their ranking
for later downloads; lacking a blob is not a fault. Dishonest answers (wrong bytes, more bytes
than asked for) are also recorded in the host's :class:`~psyche.p2p.rejections.Rejections`, so
the first one from each peer is logged at once instead of surfacing only when the whole fetch
gives up, and a peer that served wrong bytes for a blob is put in that blob's ``liars`` set,
which later fetches of the same blob skip from the start.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from psyche.p2p.control import FetchDone, FetchErrorKind, FetchFailure, blob_path
from psyche.p2p.digests import Digest, hasher
from psyche.p2p.host.blobs import (
    CHUNK,
    HEADER_LEN,
    MAX_HINTS_LEN,
    ByteStream,
    Status,
    cleanup_scope,
    decode_header,
    decode_hints,
    encode_request,
    read_exactly,
)
from psyche.p2p.host.peers import PeerTable
from psyche.p2p.rejections import Rejection, Rejections

__all__ = [
    "BUSY_RETRY_MAX_S",
    "BUSY_RETRY_S",
    "MAX_REPORTED_FAILURES",
    "FetchRequest",
    "fetch_blob",
]


class _AttemptFailed(Exception):
    """A peer answered but cannot give us the blob now (``exclude``: nor later in this fetch).

    ``penalize`` marks a bad link or a dishonest peer (ranked last for later downloads); a peer
    that merely lacks the blob or is busy keeps its ranking. ``rejection`` names a dishonest
    answer, counted and logged as such.
    """

    def __init__(
        self,
        reason: str,
        *,
        exclude: bool,
        penalize: bool,
        too_large: bool = False,
        busy: bool = False,
        hints: Sequence[str] = (),
        rejection: Rejection | None = None,
    ) -> None:
        super().__init__(reason)
        self.exclude = exclude
        self.penalize = penalize
        self.too_large = too_large
        self.busy = busy
        self.hints = hints
        self.rejection = rejection


_STATUS_FAILURE = {
    Status.NOT_FOUND: ("does not have the blob", False),
    Status.TOO_LARGE: ("says the blob exceeds max_size", True),
    Status.FORBIDDEN: ("refused us (not in its allow-list)", True),
    Status.BUSY: ("busy serving others", False),
}


async def _download(
    stream: ByteStream, blob_hash: bytes, max_size: int, part: Path, kind: Digest
) -> tuple[int, float]:
    """Fetch into ``part`` and verify (``blob_hash`` is the ``kind`` hash of the bytes);
    returns (size, seconds from request to last byte)."""
    t0 = trio.current_time()
    await stream.write(encode_request(blob_hash, max_size))
    status, length = decode_header(await read_exactly(stream, HEADER_LEN))
    if status is not Status.OK:
        reason, exclude = _STATUS_FAILURE[status]
        too_large = status is Status.TOO_LARGE
        busy = status is Status.BUSY
        hints: list[str] = []
        if busy and 0 < length <= MAX_HINTS_LEN:
            hints = decode_hints(await read_exactly(stream, length))
        raise _AttemptFailed(
            reason, exclude=exclude, penalize=False, too_large=too_large, busy=busy, hints=hints
        )
    if length > max_size:
        reason = f"announced {length} bytes > max_size {max_size}"
        raise _AttemptFailed(reason, exclude=True, penalize=True, rejection=Rejection.blob_oversize)
    digest = hasher(kind)
    got = 0
    # Plain writes: the blob dir is normally /dev/shm, where a write is a memory copy.
    with open(part, "wb") as f:
        while got < length:
            chunk = await stream.read(min(CHUNK, length - got))
            if not chunk:
                raise EOFError(f"stream ended after {got} of {length} bytes")
            digest.update(chunk)
            f.write(chunk)
            got += len(chunk)
    seconds = trio.current_time() - t0
    if digest.digest() != blob_hash:
        raise _AttemptFailed(
            "sent content that does not match the hash",
            exclude=True,
            penalize=True,
            rejection=Rejection.blob_hash_mismatch,
        )
    return length, seconds


async def _attempt(
    open_stream: Callable[[str], Awaitable[ByteStream]],
    peer: str,
    blob_hash: bytes,
    max_size: int,
    part: Path,
    kind: Digest,
) -> tuple[int, float]:
    stream = await open_stream(peer)
    ok = False
    try:
        result = await _download(stream, blob_hash, max_size, part, kind)
        ok = True
        return result
    finally:
        # Shielded so a timed-out attempt still resets its stream instead of leaving the server
        # pushing bytes into a stream nobody reads.
        with cleanup_scope(), contextlib.suppress(Exception):
            await (stream.close() if ok else stream.reset())


@dataclass(slots=True)
class FetchRequest:
    req_id: int
    blob_hash: bytes
    max_size: int
    peers: Sequence[str]
    timeout: float
    attempt_timeout: float
    digest: Digest = Digest.sha256


BUSY_RETRY_S = 0.1
"""The pause before the next pass after a peer answered BUSY; doubled after each further such
pass up to ``BUSY_RETRY_MAX_S``, so that many fetchers turned away at once (a blob handed off
to a few holders) do not flood the holders with passes while the copies spread."""
BUSY_RETRY_MAX_S = 1.0

MAX_HOLDERS = 16
"""Named holders a fetch remembers (a hint costs at most a wasted attempt, never trust)."""

MAX_REPORTED_FAILURES = 256
"""Failures kept per fetch (the most recent); a long fetch against dead peers makes many."""


async def fetch_blob(
    req: FetchRequest,
    *,
    blob_dir: Path,
    table: PeerTable,
    is_allowed: Callable[[str], bool],
    open_stream: Callable[[str], Awaitable[ByteStream]],
    rejections: Rejections | None = None,
    liars: set[str] | None = None,
    connected: Callable[[], set[str]] | None = None,
) -> FetchDone:
    """Download ``req.blob_hash`` from the best peer that has it; never raises on peer faults.

    ``liars`` holds peers that served wrong bytes for this blob before: they are not asked, and
    any peer that does so now is added (the caller keeps the set across fetches).
    ``connected`` names the peers we hold a connection to: they are asked first in every pass,
    since dialling a peer we cannot reach (behind a NAT, known only by a private address) costs
    a whole attempt timeout before anyone else is asked; after a ``BUSY`` answer, the rest of
    that pass asks only connected peers (the busy holder will serve us soon).
    """
    fetch = _Fetch(
        req,
        blob_dir=blob_dir,
        table=table,
        is_allowed=is_allowed,
        open_stream=open_stream,
        rejections=rejections,
        liars=set() if liars is None else liars,
        connected=connected,
    )
    return await fetch.run()


class _Fetch:
    """One fetch: passes over the candidate peers until one serves a verified copy, every peer
    is excluded, or the deadline passes. What the passes learn (failures, excluded peers, a
    blob too large) is kept here; ``last_pass`` and ``busy_seen`` describe the current pass."""

    def __init__(
        self,
        req: FetchRequest,
        *,
        blob_dir: Path,
        table: PeerTable,
        is_allowed: Callable[[str], bool],
        open_stream: Callable[[str], Awaitable[ByteStream]],
        rejections: Rejections | None,
        liars: set[str],
        connected: Callable[[], set[str]] | None,
    ) -> None:
        self.req = req
        self.blob_dir = blob_dir
        self.table = table
        self.is_allowed = is_allowed
        self.open_stream = open_stream
        self.rejections = rejections
        self.liars = liars
        self.connected = connected
        self.start = trio.current_time()
        self.deadline = self.start + req.timeout
        self.failures: deque[FetchFailure] = deque(maxlen=MAX_REPORTED_FAILURES)
        for peer in dict.fromkeys(req.peers):
            if peer in liars:
                self.failures.append(FetchFailure(peer, "served wrong bytes for this blob before"))
        self.excluded: set[str] = set(liars)
        self.too_large = False
        self.last_pass: list[str] = []
        self.busy_seen = False
        self.holders_only = False
        """This pass asks known holders only: the previous one had a ``BUSY`` answer."""
        self.holders: list[str] = list(req.peers[:1])
        """Peers known to hold the blob or to be receiving it, newest first: the first peer
        named (the announcer), then the peers busy holders named. Asked first in a pass."""
        self.handing_off: set[str] = set()
        """Peers that answered BUSY naming others: asked last in later passes."""
        self.new_hints: list[str] = []
        self.part = blob_dir / f"{req.blob_hash.hex()}.{req.req_id}.part"

    async def run(self) -> FetchDone:
        backoff = 0.25
        busy_pause = BUSY_RETRY_S
        try:
            while trio.current_time() < self.deadline:
                got = await self._pass()
                if got is not None:
                    return got
                if all(p in self.excluded for p in self.req.peers):
                    if self.too_large:
                        return self._done(
                            FetchErrorKind.too_large, "the blob is larger than max_size"
                        )
                    return self._done(
                        FetchErrorKind.not_found, "no asked peer can serve a verified copy"
                    )
                # A busy holder is free again (or has handed the blob to others) within moments;
                # peers that lack the blob are given more and more time to get it.
                pause = busy_pause if self.busy_seen else backoff
                await trio.sleep(min(pause, max(self.deadline - trio.current_time(), 0.0)))
                if self.busy_seen:
                    busy_pause = min(busy_pause * 2, BUSY_RETRY_MAX_S)
                else:
                    backoff = min(backoff * 2, 4.0)
            not_found = _STATUS_FAILURE[Status.NOT_FOUND][0]
            if self.last_pass and all(r == not_found for r in self.last_pass):
                return self._done(
                    FetchErrorKind.not_found, "no asked peer had the blob before the deadline"
                )
            return self._done(
                FetchErrorKind.timeout, f"no verified copy within {self.req.timeout:g} s"
            )
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.part.unlink()

    def _candidates(self) -> tuple[list[str], set[str] | None]:
        """This pass's peers in asking order, and the peers we are connected to (if known)."""
        candidates = [p for p in self.table.order(self.req.peers) if p not in self.excluded]
        # Peers a busy holder named as having the blob come first and the peers that named
        # others come last (stable sorts: the table's ranking is kept within each group), so a
        # producer handing its blob off is asked again only once nobody else served it, not as
        # soon as its handoff window closes.
        named = {p: i for i, p in enumerate(self.holders)}
        last = len(named) + 1
        candidates.sort(key=lambda p: last if p in self.handing_off else named.get(p, len(named)))
        reachable = None if self.connected is None else self.connected()
        if reachable is not None:
            candidates.sort(key=lambda p: p not in reachable)  # stable: ranking kept within
        return candidates, reachable

    async def _pass(self) -> FetchDone | None:
        """Ask each candidate once, in order; the fetch's result if one served the blob."""
        candidates, reachable = self._candidates()
        self.last_pass = []
        self.holders_only = self.busy_seen
        self.busy_seen = False
        queue = deque(candidates)
        named_now: set[str] = set()
        while queue:
            peer = queue.popleft()
            remaining = self.deadline - trio.current_time()
            if remaining <= 0:
                break
            if self.busy_seen and peer not in named_now:
                # A holder told us BUSY: it, or a peer it named (asked next), will serve us
                # soon, while the other peers most likely lack the blob or are as busy.
                # Asking each of them in every pass made a fetch's requests grow with the
                # run; they are asked in the next pass.
                continue
            if self.holders_only and not self._known_holder(peer):
                # Peers not known to hold the blob wait for a pass that follows one nobody
                # was busy in.
                continue
            if self.busy_seen and reachable is not None and peer not in reachable:
                # ... and a dial of a peer we are not connected to may cost a whole attempt
                # timeout: such holders are asked only in a pass nobody was busy in.
                continue
            if not self.is_allowed(peer):
                self._fail(peer, "not in our allow-list", exclude=True, penalize=False)
                continue
            got = await self._ask(peer, remaining)
            if got is not None:
                return got
            if self.new_hints:
                named_now = set(self.new_hints)
            for named in reversed(self.new_hints):  # ask the peers it named next
                if named in queue:
                    queue.remove(named)
                    queue.appendleft(named)
            self.new_hints = []
        return None

    def _known_holder(self, peer: str) -> bool:
        """``peer`` holds the blob or is receiving it, as far as this fetch knows."""
        return peer in self.holders or peer in self.handing_off

    async def _ask(self, peer: str, remaining: float) -> FetchDone | None:
        """One attempt at ``peer``, within the attempt timeout: the fetch's result if the peer
        served a verified copy (renamed into place), else ``None`` with the failure recorded."""
        req = self.req
        with trio.move_on_after(min(req.attempt_timeout, remaining)) as scope:
            try:
                size, seconds = await _attempt(
                    self.open_stream, peer, req.blob_hash, req.max_size, self.part, req.digest
                )
            except _AttemptFailed as e:
                self._refused(peer, e)
                return None
            except Exception as e:  # dial errors, resets, truncation: try elsewhere
                self._fail(peer, f"transfer failed: {type(e).__name__}: {e}", exclude=False)
                return None
            final = blob_path(self.blob_dir, req.blob_hash)
            os.replace(self.part, final)
            self.table.record_transfer(peer, size, seconds)
            elapsed = trio.current_time() - self.start
            return FetchDone(req.req_id, str(final), peer, size, elapsed, list(self.failures))
        if scope.cancelled_caught:
            self._fail(peer, f"no complete blob within {req.attempt_timeout:g} s", exclude=False)
        return None

    def _refused(self, peer: str, e: _AttemptFailed) -> None:
        """A peer answered without a usable blob: note why, and a dishonest answer as such."""
        self.too_large |= e.too_large
        self.busy_seen |= e.busy
        if e.hints:
            self.handing_off.add(peer)
            # Each fetcher follows the named peers in its own random order: in the server's
            # order every fetcher turned away chased the same newest holder, which serves two,
            # so copies spread by two a pass instead of doubling.
            self.new_hints = random.sample(list(e.hints), len(e.hints))
            self.holders = list(dict.fromkeys([*e.hints, *self.holders]))[:MAX_HOLDERS]
        elif e.busy and peer not in self.holders:  # it holds the blob and will serve soon
            self.holders = [*self.holders, peer][:MAX_HOLDERS]
        self._fail(peer, str(e), exclude=e.exclude, penalize=e.penalize)
        if e.rejection is Rejection.blob_hash_mismatch:
            self.liars.add(peer)
        if e.rejection is not None and self.rejections is not None:
            self.rejections.record(e.rejection, peer, f"blob {self.req.blob_hash.hex()[:16]}")

    def _fail(self, peer: str, reason: str, *, exclude: bool, penalize: bool = True) -> None:
        if penalize:
            self.table.record_failure(peer)
        self.failures.append(FetchFailure(peer, reason))
        self.last_pass.append(reason)
        if exclude:
            self.excluded.add(peer)

    def _done(self, kind: FetchErrorKind, error: str) -> FetchDone:
        """The fetch's failure result."""
        seconds = trio.current_time() - self.start
        return FetchDone(
            self.req.req_id, None, None, 0, seconds, list(self.failures), kind=kind, error=error
        )
