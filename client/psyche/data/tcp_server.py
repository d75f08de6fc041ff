"""The TCP data server: serves token samples to authenticated, authorized clients.

Clients prove who they are with the challenge–response handshake of :mod:`psyche.net.handshake`;
the connection identity is the ed25519 public key that signed the challenge (in a run, the
client's P2P key). Each request is then put to an ``authorizer(public_key, batch_id)`` that
returns ``None`` to serve it or a :class:`RejectReason`. The centralized server wires the
authorizer to coordinator state (:class:`RoundAuthorizer` is a ready-made one); ``psyche data
serve`` uses :func:`allow_all`. Unlike the reference, which never checked that requested ids were
assigned to the requester, a ``RoundAuthorizer`` answers ``WrongDataIdForStep``.

Robustness rules, because any host on the network can connect:

* every wait has a limit: the handshake must finish within ``handshake_timeout``, an
  authenticated connection may idle ``idle_timeout`` between requests, a frame once started must
  arrive within ``frame_timeout``, and a response chunk must be taken within ``send_timeout``;
* frames above :data:`MAX_REQUEST_FRAME` are refused before their payload is read, and every
  message is strictly decoded; on any protocol violation (garbage, oversize frame, bad signature,
  disconnect mid-frame) only that connection is closed and the server goes on serving the others;
* faults are counted per kind (:attr:`DataServer.faults`) and the first of each kind from each
  peer is logged as one warning, never as a traceback, so garbage in a loop does not flood the
  log;
* one request asks for at most :func:`~psyche.data.server_messages.max_request_samples`
  samples (4 MiB of tokens, 1024 samples); a larger one is answered ``TooLarge`` at once;
* reads are fair: samples are read on ``read_workers`` threads in chunks of at most
  :data:`CHUNK_TOKENS` tokens and :data:`CHUNK_SAMPLES` samples; source hosts take turns for the
  threads, a host runs at most ``reads_per_host`` chunks at once and a connection one, so a peer
  asking for a lot delays another peer's request by a chunk, not by its whole backlog;
* responses are streamed chunk by chunk (the frame header follows from the request's size), so a
  connection holds one chunk of memory, not a whole response;
* abandoned work is dropped: a connection's frames are read while its request is answered (at
  most :data:`MAX_PIPELINED` waiting), so a peer that leaves is noticed at once; its unanswered
  requests are dropped and counted (``stats["abandoned"]``) and its queued chunks never run;
* at most ``max_connections_per_host`` connections per source address are served.

Connection tracking, the handshake time limit, the per-address budget, fault counting and
shutdown are :class:`psyche.net.service.TcpService`'s; reads are scheduled by
:class:`psyche.data.read_scheduler.FairReader`.

Before these rules, reads ran on one thread and whole: one peer asking for the largest response
(64 MiB) held every other client for seconds, requests of peers that had already disconnected
were still read and sent, and each such request materialised several copies of the response.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from psyche.data.provider import DataError, DataProvider
from psyche.data.read_scheduler import FairReader
from psyche.data.server_messages import (
    AUTH,
    MAX_REQUEST_FRAME,
    MAX_RESPONSE_FRAME,
    Challenge,
    Ready,
    RejectReason,
    RequestRejected,
    RequestTrainingData,
    WireBatchId,
    WireError,
    decode_client,
    max_request_samples,
    pack_tokens,
    training_data_header,
)
from psyche.net.codec import encode_message_frame
from psyche.net.errors import BadSignature, NetError
from psyche.net.framing import frame_header, read_frame
from psyche.net.handshake import challenge_peer
from psyche.net.service import Connection, TcpService
from psyche.protocol.data_selection import BatchId

__all__ = ["Authorizer", "BackgroundDataServer", "DataServer", "RoundAuthorizer", "allow_all"]

log = logging.getLogger(__name__)

CHUNK_TOKENS = 1 << 16
"""Tokens read per job (256 KiB on the wire): a few milliseconds of work, so a host waiting for
a thread waits about that long per other busy host."""
CHUNK_SAMPLES = 128
"""Samples read per job, for short samples (the shuffle costs per sample)."""
MAX_PIPELINED = 4
"""Requests one connection may send ahead of the answers (honest clients send one at a time)."""

Authorizer = Callable[[bytes, BatchId], RejectReason | None]


def allow_all(public_key: bytes, batch_id: BatchId) -> RejectReason | None:
    """Serve every authenticated client (manual use and demos only)."""
    return None


class RoundAuthorizer:
    """Serve only epoch clients, and only intervals inside one assigned to them this round.

    Keys are the clients' P2P public keys. ``update`` replaces the state atomically (call it on
    every coordinator snapshot); a requested interval may be any sub-interval of an assigned one.
    """

    def __init__(self) -> None:
        self._clients: frozenset[bytes] = frozenset()
        self._assigned: dict[bytes, tuple[BatchId, ...]] = {}

    def update(
        self,
        epoch_clients: Iterable[bytes],
        assignments: Mapping[BatchId, bytes],
        grants: Mapping[bytes, Iterable[BatchId]] | None = None,
    ) -> None:
        """``grants``: intervals a client may fetch besides its assignments (a verifier's
        recompute of another trainer's batch)."""
        assigned: dict[bytes, list[BatchId]] = {}
        for batch, key in assignments.items():
            assigned.setdefault(bytes(key), []).append(batch)
        for key, batches in (grants or {}).items():
            assigned.setdefault(bytes(key), []).extend(batches)
        self._clients, self._assigned = (
            frozenset(bytes(k) for k in epoch_clients),
            {k: tuple(v) for k, v in assigned.items()},
        )

    def __call__(self, public_key: bytes, batch_id: BatchId) -> RejectReason | None:
        if public_key not in self._clients:
            return RejectReason.NotInThisRound
        for b in self._assigned.get(public_key, ()):
            if b.start <= batch_id.start and batch_id.end <= b.end:
                return None
        return RejectReason.WrongDataIdForStep


class _Idle(DataError):
    """No request for ``idle_timeout`` seconds."""


class _Requests:
    """Requests read from one connection and not answered yet."""

    def __init__(self) -> None:
        self.waiting: deque[WireBatchId] = deque()
        self.arrived = asyncio.Event()
        self.busy = False
        """A request is being answered."""


class DataServer(TcpService[Connection, bytes]):
    """Serves ``provider`` over TCP; start with :meth:`start`, stop with :meth:`close`.

    ``provider`` is called from up to ``read_workers`` threads at once; :class:`LocalDataProvider`
    is safe for that (its only shared state, the map cache, is locked). Pass ``read_workers=1``
    for a provider that is not.
    """

    def __init__(
        self,
        provider: DataProvider,
        authorizer: Authorizer,
        *,
        handshake_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        frame_timeout: float = 10.0,
        send_timeout: float = 30.0,
        max_samples_per_request: int | None = None,
        read_workers: int = 4,
        reads_per_host: int = 1,
        max_connections_per_host: int = 64,
    ) -> None:
        super().__init__(
            log,
            handshake_timeout=handshake_timeout,
            max_connections_per_address=max_connections_per_host,
        )
        self.provider = provider
        self.authorizer = authorizer
        self.idle_timeout = idle_timeout
        self.frame_timeout = frame_timeout
        self.send_timeout = send_timeout
        cap = max_request_samples(provider.seq_len)
        self.max_samples = min(max_samples_per_request or cap, cap)
        self.chunk_samples = max(1, min(CHUNK_SAMPLES, CHUNK_TOKENS // provider.seq_len))
        self.stats.update(
            auth_failures=0,
            dropped=0,
            idle_closed=0,
            served=0,
            abandoned=0,
            chunks_read=0,
            chunks_wasted=0,
        )
        """``served``: complete responses; ``abandoned``: requests dropped unanswered or
        half-sent because their peer left; ``chunks_read``: reads run; ``chunks_wasted``: reads
        that finished after their peer had left (a read cannot be stopped once running)."""
        self._reader = FairReader(self._read, read_workers, reads_per_host, self.stats)

    async def close(self) -> None:
        await super().close()
        self._reader.close()

    def summary(self) -> str:
        """One line of counters, for the log."""
        stats = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in self.stats.items())
        return f"{stats}; faults: {self.faults.summary()}"

    def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Connection:
        return Connection(reader, writer)

    def on_error(self, conn: Connection, error: Exception) -> None:
        if isinstance(error, _Idle):
            self.stats["idle_closed"] += 1
            log.debug("data client %s idle, closed", conn.name)
            return
        self.stats["dropped"] += 1
        if isinstance(error, WireError):
            self.faults.record(conn.fault_peer, "malformed", str(error))
        elif isinstance(error, DataError):
            log.info("data client %s dropped: %s", conn.name, error)
        else:
            super().on_error(conn, error)

    async def authenticate(self, conn: Connection) -> bytes | None:
        async def send_challenge(nonce: bytes) -> None:
            conn.writer.write(encode_message_frame(Challenge(nonce), MAX_RESPONSE_FRAME))
            await conn.writer.drain()

        try:
            key = await challenge_peer(
                AUTH, conn.reader, send_challenge, decode_client, MAX_REQUEST_FRAME
            )
        except BadSignature as e:
            # Closed without a reply: a peer probing keys learns nothing from the server.
            self.stats["auth_failures"] += 1
            self.faults.record(conn.fault_peer, e.kind, "challenge signature does not verify")
            return None
        if key is None:
            return None
        conn.label = f"{conn.host} key {key[:8].hex()}"
        ready = Ready(seq_len=self.provider.seq_len, num_samples=self.provider.num_samples)
        conn.writer.write(encode_message_frame(ready, MAX_RESPONSE_FRAME))
        await conn.writer.drain()
        return key

    async def session(self, conn: Connection, key: bytes) -> None:
        """Read requests and answer them concurrently, until either side stops.

        Reading goes on while a request is answered, so a peer that leaves is noticed at once and
        its unanswered requests are dropped instead of read for nobody.
        """
        requests = _Requests()
        reading = asyncio.create_task(self._read_requests(conn.reader, requests))
        serving = asyncio.create_task(self._serve_requests(conn.writer, key, conn.host, requests))
        try:
            done, _ = await asyncio.wait((reading, serving), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (reading, serving):
                t.cancel()
            await asyncio.gather(reading, serving, return_exceptions=True)
        if serving not in done:
            self.stats["abandoned"] += len(requests.waiting) + requests.busy
        for t in (reading, serving):
            if t in done and (error := t.exception()) is not None:
                raise error

    async def _read_requests(self, reader: asyncio.StreamReader, requests: _Requests) -> None:
        while (
            frame := await read_frame(reader, MAX_REQUEST_FRAME, frame_timeout=self.frame_timeout)
        ) is not None:
            msg = decode_client(frame)
            if not isinstance(msg, RequestTrainingData):
                raise WireError(f"expected RequestTrainingData, got {type(msg).__name__}")
            if len(requests.waiting) >= MAX_PIPELINED:
                raise NetError(f"more than {MAX_PIPELINED} requests waiting", "too_many_requests")
            requests.waiting.append(msg.batch_id)
            requests.arrived.set()

    async def _serve_requests(
        self, writer: asyncio.StreamWriter, key: bytes, host: str, requests: _Requests
    ) -> None:
        while True:
            if not requests.waiting:
                requests.arrived.clear()
                try:
                    async with asyncio.timeout(self.idle_timeout):
                        await requests.arrived.wait()
                except TimeoutError:
                    raise _Idle(f"no request for {self.idle_timeout:g} s") from None
            wire_id = requests.waiting.popleft()
            requests.busy = True
            await self._answer(writer, key, host, wire_id)
            requests.busy = False

    async def _answer(
        self, writer: asyncio.StreamWriter, key: bytes, host: str, wire_id: WireBatchId
    ) -> None:
        batch = wire_id.to_batch_id()
        if batch is None:
            reason: RejectReason | None = RejectReason.Malformed
        elif batch.size > self.max_samples:
            reason = RejectReason.TooLarge
        else:
            reason = self.authorizer(key, batch)
            if reason is not None:
                log.info("rejected %s for %s: %s", batch, key[:4].hex(), reason.value)
        if reason is not None:
            writer.write(encode_message_frame(RequestRejected(wire_id, reason), MAX_RESPONSE_FRAME))
            await self._drain(writer)
            return
        assert batch is not None
        # Streamed: the frame header follows from the request's size, and each chunk goes out
        # as soon as it is read, so a response never sits whole in memory.
        row_bytes = 4 * self.provider.seq_len
        header = training_data_header(wire_id, batch.size * row_bytes)
        prefix = frame_header(len(header) + batch.size * row_bytes) + header
        step = self.chunk_samples
        for start in range(batch.start, batch.end + 1, step):
            piece = BatchId(start, min(start + step - 1, batch.end))
            tokens = await self._reader.read(host, piece)
            if len(tokens) != piece.size * row_bytes:
                raise DataError(f"provider returned {len(tokens)} bytes for {piece}")
            # The header goes out with the first chunk, so a read that fails before any byte
            # was sent leaves no half frame behind.
            writer.write(prefix)
            prefix = b""
            if piece.end == batch.end:
                # Counted before the last write: the peer may have it all before this thread
                # runs its next line.
                self.stats["served"] += 1
            writer.write(tokens)
            await self._drain(writer)

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self.send_timeout):
                await writer.drain()
        except TimeoutError:
            raise NetError(f"took nothing for {self.send_timeout:g} s", "slow_reader") from None

    def _read(self, batch: BatchId) -> bytes:
        return pack_tokens(self.provider.get_samples(batch))


class BackgroundDataServer:
    """A :class:`DataServer` on its own event loop thread, for synchronous callers and tests."""

    def __init__(self, server: DataServer, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(server.start(host, port), self._loop).result(10)
        self.port = server.port

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> BackgroundDataServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
