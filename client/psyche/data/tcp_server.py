"""The TCP data server: serves token samples to authenticated, authorized clients.

Clients prove who they are with the challenge–response handshake of :mod:`psyche.data.wire`;
the connection identity is the ed25519 public key that signed the challenge (in a run, the
client's P2P key). Each request is then put to an ``authorizer(public_key, batch_id)`` that
returns ``None`` to serve it or a :class:`RejectReason`. The centralized server wires the
authorizer to coordinator state (:class:`RoundAuthorizer` is a ready-made one); ``psyche data
serve`` uses :func:`allow_all`. Unlike the reference, which never checked that requested ids were
assigned to the requester (SPEC §11.20), a ``RoundAuthorizer`` answers ``WrongDataIdForStep``.

Robustness rules, because any host on the network can connect:

* every read has a limit: the handshake must finish within ``handshake_timeout`` and an
  authenticated connection may idle ``idle_timeout`` between requests;
* frames above :data:`MAX_REQUEST_FRAME` are refused before their payload is read, and every
  message is strictly decoded; on any protocol violation (garbage, oversize frame, bad signature,
  disconnect mid-frame) only that connection is closed and the server goes on serving the others;
* a message that does not decode (including hostile nesting or invalid UTF-8) is a
  :class:`WireError`, logged as one warning per peer host and then only counted
  (``stats["malformed"]``), never as a traceback;
* one request returns at most ``max_samples_per_request`` samples (default: what fits in the
  client's 64 MiB frame limit), larger intervals are ``Malformed``;
* samples are read on one worker thread, so providers need not be thread-safe and a slow disk
  read never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from psyche.data.framing import MAX_REQUEST_FRAME, MAX_RESPONSE_FRAME, encode_frame, read_frame
from psyche.data.provider import DataError, DataProvider
from psyche.data.wire import (
    Challenge,
    ChallengeResponse,
    Ready,
    RejectReason,
    RequestRejected,
    RequestTrainingData,
    TrainingData,
    WireBatchId,
    WireError,
    auth_message,
    decode_client,
    encode,
    pack_tokens,
)
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import verify_signature

__all__ = ["Authorizer", "BackgroundDataServer", "DataServer", "RoundAuthorizer", "allow_all"]

log = logging.getLogger(__name__)

# Enough for every host of a real run; an attacker with more addresses only re-earns a warning.
_MAX_TRACKED_HOSTS = 4096

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

    def update(self, epoch_clients: Iterable[bytes], assignments: Mapping[BatchId, bytes]) -> None:
        assigned: dict[bytes, list[BatchId]] = {}
        for batch, key in assignments.items():
            assigned.setdefault(bytes(key), []).append(batch)
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


class DataServer:
    """Serves ``provider`` over TCP; start with :meth:`start`, stop with :meth:`close`."""

    def __init__(
        self,
        provider: DataProvider,
        authorizer: Authorizer,
        *,
        handshake_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        max_samples_per_request: int | None = None,
    ) -> None:
        self.provider = provider
        self.authorizer = authorizer
        self.handshake_timeout = handshake_timeout
        self.idle_timeout = idle_timeout
        fit = (MAX_RESPONSE_FRAME - 1024) // (4 * provider.seq_len)
        self.max_samples = min(max_samples_per_request or fit, fit)
        self.stats = {
            "connections": 0,
            "auth_failures": 0,
            "dropped": 0,
            "malformed": 0,
            "served": 0,
        }
        self._malformed_hosts: dict[str, int] = {}
        """Malformed messages per peer host; bounded by :data:`_MAX_TRACKED_HOSTS`."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="data-server-read")

    async def start(self, host: str = "0.0.0.0", port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def serve_forever(self) -> None:
        assert self._server is not None, "server not started"
        await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Python 3.11's Server.close() leaves accepted connections open: end them ourselves.
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        self._reader.shutdown(wait=False, cancel_futures=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        self.stats["connections"] += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            key = await asyncio.wait_for(self._handshake(reader, writer), self.handshake_timeout)
            if key is None:
                return
            while True:
                frame = await asyncio.wait_for(
                    read_frame(reader, MAX_REQUEST_FRAME), self.idle_timeout
                )
                if frame is None:
                    return
                msg = decode_client(frame)
                if not isinstance(msg, RequestTrainingData):
                    raise WireError(f"expected RequestTrainingData, got {type(msg).__name__}")
                reply = await self._answer(key, msg.batch_id)
                writer.write(encode_frame(encode(reply)))
                await asyncio.wait_for(writer.drain(), self.idle_timeout)
        except WireError as e:
            self.stats["dropped"] += 1
            self._malformed_from(peer, e)
        except (DataError, TimeoutError, OSError) as e:
            self.stats["dropped"] += 1
            log.info("data client %s dropped: %s", peer, e or type(e).__name__)
        except asyncio.CancelledError:
            pass  # server shutdown; letting it escape makes asyncio log a spurious error
        except Exception:
            self.stats["dropped"] += 1
            log.exception("data client %s: internal error, connection closed", peer)
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _malformed_from(self, peer: object, e: WireError) -> None:
        # A hostile host can reconnect and send garbage in a loop: one warning per host tells the
        # operator who it is, the counters say how often, and the log does not grow with it.
        self.stats["malformed"] += 1
        host = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        seen = self._malformed_hosts.get(host, 0)
        if not seen:
            if len(self._malformed_hosts) >= _MAX_TRACKED_HOSTS:
                del self._malformed_hosts[next(iter(self._malformed_hosts))]
            log.warning(
                "data client %s dropped: %s (further malformed messages from %s are only counted)",
                peer,
                e,
                host,
            )
        self._malformed_hosts[host] = seen + 1

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bytes | None:
        nonce = secrets.token_bytes(32)
        writer.write(encode_frame(encode(Challenge(nonce))))
        await writer.drain()
        frame = await read_frame(reader, MAX_REQUEST_FRAME)
        if frame is None:
            return None
        msg = decode_client(frame)
        if not isinstance(msg, ChallengeResponse):
            raise WireError(f"expected ChallengeResponse, got {type(msg).__name__}")
        if not verify_signature(msg.public_key, auth_message(nonce), msg.signature):
            self.stats["auth_failures"] += 1
            log.warning(
                "data client %s: bad challenge signature", writer.get_extra_info("peername")
            )
            return None
        ready = Ready(seq_len=self.provider.seq_len, num_samples=self.provider.num_samples)
        writer.write(encode_frame(encode(ready)))
        await writer.drain()
        return msg.public_key

    async def _answer(self, key: bytes, wire_id: WireBatchId) -> TrainingData | RequestRejected:
        batch = wire_id.to_batch_id()
        if batch is None or batch.size > self.max_samples:
            return RequestRejected(wire_id, RejectReason.Malformed)
        reason = self.authorizer(key, batch)
        if reason is not None:
            log.info("rejected %s for %s: %s", batch, key[:4].hex(), reason.value)
            return RequestRejected(wire_id, reason)
        loop = asyncio.get_running_loop()
        tokens = await loop.run_in_executor(self._reader, self._read, batch)
        self.stats["served"] += 1
        return TrainingData(wire_id, tokens)

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
