"""The blob protocol and its server (host process, trio); the fetching side is :mod:`.fetch`.

Protocol ``/psyche/blob/1``, one request per stream::

    request   blob_hash (32 bytes, SHA-256 of the content) ‖ max_size (u64 big-endian)
    response  status (u8) ‖ length (u64 big-endian) ‖ length bytes when status is OK;
              with BUSY, length bytes of hints (≤ MAX_HINTS_LEN): the peer ids, newline-separated,
              of the last few peers this server uploaded the blob to, which serve it from then on

Content addressing makes serving safe for everyone: a client serves its own payloads *and* every
payload it has downloaded and verified, so a producer uploads a handful of copies rather than
N−1 and the blob survives the producer leaving. The server answers only allowed peers
(``FORBIDDEN``), refuses a blob larger than the requester's ``max_size`` before sending a byte
(``TOO_LARGE``), caps concurrent uploads (``BUSY``) so serving cannot starve gossip, hands a
blob off once it has uploaded it twice (``BUSY`` for a while, naming the peers that got it, so
later fetchers take it from them; see :class:`BlobServer`), and gives every request a deadline
derived from the blob size (a floor rate), so a frozen or malicious reader cannot hold an
upload slot. ``/psyche/ping/1`` echoes 8 bytes; its round trip is the latency the fetcher ranks
peers by.

Streams are typed by the small :class:`ByteStream` protocol, not libp2p classes, so this module
and :mod:`.fetch` are unit-tested with in-memory streams and never import libp2p.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import trio

__all__ = [
    "BLOB_PROTOCOL",
    "MAX_HINTS",
    "MAX_HINTS_LEN",
    "PING_PROTOCOL",
    "BlobServer",
    "ByteStream",
    "Status",
    "cleanup_scope",
    "decode_header",
    "decode_hints",
    "decode_request",
    "encode_header",
    "encode_hints",
    "encode_request",
    "ping",
    "read_exactly",
    "serve_ping",
]

log = logging.getLogger(__name__)

BLOB_PROTOCOL = "/psyche/blob/1"
PING_PROTOCOL = "/psyche/ping/1"
PING_LEN = 8
HASH_LEN = 32
REQUEST_LEN = HASH_LEN + 8
HEADER_LEN = 1 + 8
CHUNK = 1 << 20
"""1 MiB reads and writes: the size at which Noise+Yamux reached ~200 MB/s.

See docs/p2p-nat.md, "The libp2p host process".
"""


_MAX_TRACKED = 1024
"""Fetchers tracked per blob (handoff refusals, askers): more than a run's clients."""

MAX_HINTS = 4
"""Peers a ``BUSY`` answer names at most: the blob's most recent receivers."""
MAX_HINTS_LEN = 1024
"""A longer hint list is not read (the fetcher treats the answer as a plain ``BUSY``)."""


class Status(enum.IntEnum):
    OK = 0
    NOT_FOUND = 1
    TOO_LARGE = 2
    FORBIDDEN = 3
    BUSY = 4


class ByteStream(Protocol):
    async def read(self, n: int | None = None) -> bytes: ...
    async def write(self, data: bytes) -> None: ...
    async def close(self) -> None: ...
    async def reset(self) -> None: ...


def encode_request(blob_hash: bytes, max_size: int) -> bytes:
    if len(blob_hash) != HASH_LEN or not 0 <= max_size < 2**64:
        raise ValueError("a blob request needs a 32-byte hash and a u64 max size")
    return bytes(blob_hash) + max_size.to_bytes(8, "big")


def decode_request(data: bytes) -> tuple[bytes, int]:
    if len(data) != REQUEST_LEN:
        raise ValueError(f"a blob request is {REQUEST_LEN} bytes, got {len(data)}")
    return bytes(data[:HASH_LEN]), int.from_bytes(data[HASH_LEN:], "big")


def encode_header(status: Status, length: int) -> bytes:
    return bytes([status]) + length.to_bytes(8, "big")


def decode_header(data: bytes) -> tuple[Status, int]:
    if len(data) != HEADER_LEN:
        raise ValueError(f"a blob response header is {HEADER_LEN} bytes, got {len(data)}")
    try:
        status = Status(data[0])
    except ValueError:
        raise ValueError(f"unknown blob response status {data[0]}") from None
    return status, int.from_bytes(data[1:], "big")


def encode_hints(peers: Iterable[str]) -> bytes:
    """The hint list of a ``BUSY`` answer: up to :data:`MAX_HINTS` peer ids that fit."""
    out = b""
    for peer in list(peers)[:MAX_HINTS]:
        item = peer.encode("ascii", "replace")
        if b"\n" in item or len(out) + len(item) + 1 > MAX_HINTS_LEN:
            continue
        out += item + b"\n"
    return out


def decode_hints(data: bytes) -> list[str]:
    """Peer ids named by a ``BUSY`` answer; anything that is not printable ASCII is dropped
    (a hint only changes whom a fetcher asks first, and every copy is still hash-checked)."""
    peers = []
    for item in data.split(b"\n")[:MAX_HINTS]:
        if item and item.isascii() and item.decode("ascii").isprintable():
            peers.append(item.decode("ascii"))
    return peers


async def read_exactly(stream: ByteStream, n: int) -> bytes:
    """``n`` bytes or ``EOFError`` (py-libp2p's StreamEOF is one) if the stream ends first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.read(n - len(buf))
        if not chunk:
            raise EOFError(f"stream ended after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def cleanup_scope() -> trio.CancelScope:
    """A short shielded scope: closing or resetting a stream must happen even when cancelled."""
    return trio.CancelScope(deadline=trio.current_time() + 1.0, shield=True)


async def ping(stream: ByteStream) -> float:
    """Round-trip time of one ``/psyche/ping/1`` exchange (8 random bytes echoed back)."""
    probe = os.urandom(PING_LEN)
    try:
        t0 = trio.current_time()
        await stream.write(probe)
        echo = await read_exactly(stream, PING_LEN)
        rtt = trio.current_time() - t0
    finally:
        with cleanup_scope(), contextlib.suppress(Exception):
            await stream.close()
    if echo != probe:
        raise ValueError("ping echo does not match")
    return rtt


async def serve_ping(stream: ByteStream) -> None:
    try:
        with trio.fail_after(5.0):
            await stream.write(await read_exactly(stream, PING_LEN))
            await stream.close()
    except Exception:
        with contextlib.suppress(Exception):
            await stream.reset()


@dataclass(slots=True)
class _Served:
    path: str
    size: int
    active: int = 0
    handoff: bool = True
    uploads: int = 0
    """Uploads completed."""
    handoff_until: float = -1.0
    """Until then (trio clock) this blob is left to the peers that got it from us."""
    receivers: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_HINTS))
    """The peers we last uploaded it to or are uploading it to, newest first: a ``BUSY``
    answer names them."""
    turned_away: dict[str, int] = field(default_factory=dict)
    """Per fetcher, the requests the handoff refused."""
    askers: set[str] | None = None
    """Allowed peers that asked for it, whatever the answer (None: not tracked). Only an
    announcement names a blob, so an asker has heard it (:meth:`BlobServer.take_asked`)."""


@dataclass(slots=True)
class BlobServer:
    """Answers blob requests from the files the parent registered."""

    is_allowed: Callable[[str], bool]
    max_concurrent: int = 8
    max_per_blob: int = 2
    """Uploads of one blob at once; further fetchers are told BUSY and ask again, by then also
    the peers that got it first (a fetched blob is served from then on). So a producer's uplink,
    the scarce link of a home connection, is never split more than two ways for one result.
    On its own it bounds concurrency, not the count: small payloads are done before a third
    fetcher asks (``handoff_after`` bounds the count)."""
    handoff_after: int = 2
    """Completed uploads of one blob after which further fetchers are told BUSY for a while
    (the handoff window), so they take it from the peers that already got it: every holder,
    the producer included, then uploads a blob about twice whatever the number of fetchers,
    and the copies spread as a tree. After the window a fetcher is served the second time it
    asks (the first is told BUSY with the holders' names), so one that cannot reach any other
    holder (NAT, departed peers) still gets it, late."""
    handoff_min_s: float = 10.0
    """The handoff window: this, plus ``handoff_factor`` times the upload that completed the
    ``handoff_after``-th copy (a slower link gives the new holders longer to be asked). Long
    enough for the copies to spread as a tree on loaded hosts (the 16-host bench's rounds take
    about 9 s on 2 cores; a 1 s window let producers upload up to 9 copies); a fetcher the
    named holders do not serve is not held up by it (``handoff_patience``)."""
    handoff_factor: float = 4.0
    handoff_max_s: float = 30.0
    handoff_patience: int = 3
    """A fetcher turned away this many times by one blob's handoff is served on its next
    request, window or not: the holders it was named did not serve it (NAT, departed or
    unwilling peers), and each of its passes has asked everyone else first (``fetch`` asks a
    peer that named others last), so it waits a few passes, never the whole window. Once the
    window is over, one refusal is enough."""
    request_timeout: float = 10.0
    """Time to receive the request; also the fixed part of every upload's deadline."""
    min_rate_bps: float = 250_000.0
    """Uploads slower than this are cut (a frozen or malicious fetcher). 2 Mbit/s: a home
    uplink of 20 Mbit/s shares itself among several uploads (payloads, model pieces), and at
    the 1 MB/s this was, honest uploads of 8 MiB model pieces were cut on the emulated
    internet."""
    served: int = 0
    refused: int = 0
    handed_off: int = 0
    """Requests refused (BUSY, also in ``refused``) because the blob was being handed off."""
    _blobs: dict[bytes, _Served] = field(default_factory=dict)
    _active: int = 0
    _asked: dict[bytes, list[str]] = field(default_factory=dict)
    """New askers of tracked blobs since the last :meth:`take_asked`."""

    def serve(
        self,
        blob_hash: bytes,
        path: str,
        size: int,
        *,
        handoff: bool = True,
        report_askers: bool = False,
    ) -> None:
        """``handoff=False`` for blobs fetched from named peers only (model snapshot pieces: a
        joiner asks one holder per request, so a holder handing off would only delay it);
        ``report_askers`` for this client's own announced payloads, whose askers
        :meth:`take_asked` reports."""
        askers: set[str] | None = set() if report_askers else None
        self._blobs[blob_hash] = _Served(path, size, handoff=handoff, askers=askers)

    def take_asked(self, limit: int) -> list[tuple[bytes, list[str]]]:
        """The peers that first asked for a tracked blob since the last call, per blob, at most
        ``limit`` peers in all (the rest wait for the next call). The parent stops resending an
        announcement once every member asked for its blob (``psyche.daemon.resending``)."""
        out: list[tuple[bytes, list[str]]] = []
        for blob_hash in list(self._asked):
            if limit <= 0:
                break
            peers = self._asked[blob_hash]
            out.append((blob_hash, peers[:limit]))
            del peers[:limit]
            limit -= len(out[-1][1])
            if not peers:
                del self._asked[blob_hash]
        return out

    def unserve(self, blob_hash: bytes) -> None:
        self._blobs.pop(blob_hash, None)
        self._asked.pop(blob_hash, None)

    def has(self, blob_hash: bytes) -> bool:
        return blob_hash in self._blobs

    async def handle(self, stream: ByteStream, peer: str) -> None:
        try:
            with trio.move_on_after(self.request_timeout) as scope:
                blob_hash, max_size = decode_request(await read_exactly(stream, REQUEST_LEN))
            if scope.cancelled_caught:
                raise TimeoutError("no request in time")
            await self._answer(stream, peer, blob_hash, max_size)
            await stream.close()
        except Exception as e:  # any stream fault ends this one request, never the host
            log.debug("blob request from %s failed: %s", peer, e)
            with contextlib.suppress(Exception):
                await stream.reset()

    async def _answer(self, stream: ByteStream, peer: str, blob_hash: bytes, max_size: int) -> None:
        blob = self._blobs.get(blob_hash)
        allowed = self.is_allowed(peer)
        if allowed and blob is not None and blob.askers is not None:
            self._note_asker(blob_hash, blob.askers, peer)
        status = Status.OK
        if not allowed:
            status = Status.FORBIDDEN
        elif blob is None:
            status = Status.NOT_FOUND
        elif blob.size > max_size:
            status = Status.TOO_LARGE
        elif self._active >= self.max_concurrent or blob.active >= self.max_per_blob:
            status = Status.BUSY
        elif self._handing_off(blob, peer):
            status = Status.BUSY
            self.handed_off += 1
        if status is Status.BUSY and blob is not None:
            # Name the peers that got it from us: the fetcher asks them next instead of
            # walking every peer (most lack it) and coming back here once the window closes.
            self.refused += 1
            hints = encode_hints(blob.receivers)
            await stream.write(encode_header(status, len(hints)) + hints)
            return
        if status is not Status.OK or blob is None:
            self.refused += 1
            await stream.write(encode_header(status, blob.size if blob else 0))
            return
        self._active += 1
        blob.active += 1
        # Named from the start of its upload: a fetcher turned away meanwhile asks it first in
        # its next pass, by when it holds the blob, instead of this server again.
        if peer in blob.receivers:
            blob.receivers.remove(peer)
        blob.receivers.appendleft(peer)
        t0 = trio.current_time()
        uploaded = False
        try:
            with trio.move_on_after(self.request_timeout + blob.size / self.min_rate_bps) as scope:
                uploaded = await self._upload(stream, blob)
            if scope.cancelled_caught:
                raise TimeoutError(f"upload of {blob.size} bytes to {peer} too slow")
            if not uploaded:
                self.refused += 1
                return
            self.served += 1
            blob.uploads += 1
            if blob.uploads == self.handoff_after:
                now = trio.current_time()
                window = self.handoff_min_s + self.handoff_factor * (now - t0)
                blob.handoff_until = now + min(window, self.handoff_max_s)
        finally:
            self._active -= 1
            blob.active -= 1
            if not uploaded and peer in blob.receivers:
                blob.receivers.remove(peer)

    def _note_asker(self, blob_hash: bytes, askers: set[str], peer: str) -> None:
        if peer not in askers and len(askers) < _MAX_TRACKED:
            askers.add(peer)
            self._asked.setdefault(blob_hash, []).append(peer)

    def _handing_off(self, blob: _Served, peer: str) -> bool:
        """True while ``peer`` should ask the blob's other holders: ``handoff_after`` copies
        are done or under way, the window after the last of them is not over, and ``peer`` has
        not been turned away ``handoff_patience`` times already (counted here)."""
        if not blob.handoff or blob.uploads + blob.active < self.handoff_after:
            return False
        patience = self.handoff_patience
        if blob.handoff_until >= 0 and trio.current_time() >= blob.handoff_until:
            # Past the window a fetcher is still named the holders once: at 32 hosts on 2 cores
            # rounds outlast the window, and every fetcher that heard late (a resend, gossip
            # repair) got a third or later copy from the producer; one that cannot reach them
            # is served when it comes back.
            patience = 1
        refused = blob.turned_away.get(peer, 0)
        if refused >= patience:
            return False
        if refused or len(blob.turned_away) < _MAX_TRACKED:
            blob.turned_away[peer] = refused + 1
        return True

    async def _upload(self, stream: ByteStream, blob: _Served) -> bool:
        """Send the blob; False if its file is gone (the fetcher is told NOT_FOUND)."""
        # trio.open_file runs each call in a worker thread, so a slow disk (or a pipe) never
        # blocks gossip in this event loop.
        try:
            f = await trio.open_file(blob.path, "rb")
        except OSError:
            await stream.write(encode_header(Status.NOT_FOUND, 0))
            return False
        async with f:
            if not await trio.to_thread.run_sync(_still_served, f.fileno(), blob.path):
                await stream.write(encode_header(Status.NOT_FOUND, 0))
                return False
            await stream.write(encode_header(Status.OK, blob.size))
            sent = 0
            while sent < blob.size:
                chunk = await f.read(min(CHUNK, blob.size - sent))
                if not chunk:
                    # The file shrank under us: abort so the fetcher sees a truncated blob.
                    raise EOFError(f"{blob.path} ended after {sent} of {blob.size} bytes")
                await stream.write(chunk)
                sent += len(chunk)
        return True


def _still_served(fd: int, path: str) -> bool:
    """Hold a shared lock on the open file for the upload (released when it is closed) and
    check that ``path`` still names it. A withdrawn file may be written over by its owner
    (``psyche.training.audit_files``), which first moves it from its name and then takes an
    exclusive lock: an upload that locked first keeps it from being reused, one that did not
    finds it gone."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        named, opened = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)
