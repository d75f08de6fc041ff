"""``CentralizedBackend``: the client side of the centralized server, behind the Backend seam.

One background task owns the connection: connect, answer the challenge with the node's ed25519
key, ``Join`` the run, then read states until the connection drops, and start over with
exponential backoff (the server keeps a reconnecting client's place: it joins again and takes
part in the next epoch). The daemon only sees :class:`~psyche.backends.base.Backend` methods.

Failure policy:

* A refusal is an answer, not a fault: ``JoinRejected`` (wrong run id) and a server speaking
  another protocol version are fatal and raised from every later call, with the server's reason.
* Transport faults and a server that breaks the protocol (undecodable frame, invalid state) drop
  the connection and reconnect. Before the first successful join at most ``connect_attempts``
  tries are made (a daemon started before its server waits a while, a wrong address fails
  soon); after it, ``reconnect_attempts`` (default: forever, the daemon decides when to give up).
* ``Error{reason}`` replies (e.g. a witness the coordinator rejected) are logged and queued for
  :meth:`CentralizedBackend.next_rejection`; sends are fire-and-forget (see the Backend seam).
* While joined, a ``Keepalive`` goes out every ``keepalive_interval`` (10 s): the server closes
  connections that start no frame for a minute, and a client has nothing else to send between
  rounds.

States: every state is validated by ``serde.from_json`` before anyone sees it, must be of our run,
and is delivered once, in order, only if its ``seq`` is newer than the last one delivered (a state
re-sent on reconnect is not delivered twice). If a restarted server's ``seq`` is lower than ours
(its clock went backwards) the first state of the new connection is accepted anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from psyche.backends.base import (
    BackendClosedError,
    BackendError,
    BackendProtocolError,
    HealthCheckEntries,
    JoinRejectedError,
)
from psyche.backends.centralized.protocol import (
    AUTH,
    MAX_CLIENT_FRAME,
    MAX_SERVER_FRAME,
    PROTOCOL_VERSION,
    Challenge,
    CheckpointMsg,
    ErrorMsg,
    HealthCheckMsg,
    Join,
    JoinRejected,
    KeepaliveMsg,
    P2PAddrsMsg,
    PeersMsg,
    ProtocolError,
    ServerMessage,
    StateMsg,
    WarmupWitnessMsg,
    WitnessMsg,
    decode_server,
    frame,
    read_message,
)
from psyche.backends.inbox import Inbox
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import Witness, WitnessMetadata
from psyche.net.address import parse_address
from psyche.protocol.coordinator_config import RUN_ID_MAX_LEN
from psyche.protocol.identity import NodeIdentity, SecretKey
from psyche.protocol.locations import Checkpoint

__all__ = ["CentralizedBackend", "IncompatibleServerError"]

log = logging.getLogger(__name__)


class IncompatibleServerError(BackendError):
    """The server speaks another protocol version."""


class CentralizedBackend:
    """A :class:`~psyche.backends.base.Backend` talking to ``psyche-centralized-server``."""

    def __init__(
        self,
        server_addr: str,
        secret_key: SecretKey,
        run_id: str,
        *,
        connect_timeout: float = 5.0,
        connect_attempts: int = 10,
        reconnect_attempts: int | None = None,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        send_timeout: float = 10.0,
        keepalive_interval: float = 10.0,
        max_buffered_states: int = 64,
        max_buffered_rejections: int = 64,
    ) -> None:
        if not run_id or len(run_id.encode()) > RUN_ID_MAX_LEN:
            raise ValueError(f"run_id must be 1 to {RUN_ID_MAX_LEN} bytes, got {run_id!r}")
        self.address = parse_address(server_addr)
        self.run_id = run_id
        self._key = secret_key
        self.identity: NodeIdentity = secret_key.node_identity()
        self._connect_timeout = connect_timeout
        self._connect_attempts = connect_attempts
        self._reconnect_attempts = reconnect_attempts
        self._backoff = (backoff, max_backoff)
        self._send_timeout = send_timeout
        self._keepalive_interval = keepalive_interval
        self._inbox = Inbox(max_buffered_states, max_buffered_rejections)
        self._last_seq: int | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self.connections = 0
        """How many times a join succeeded (1 + reconnects)."""
        self._my_addrs: list[str] | None = None
        self._peers: dict[bytes, list[str]] = {}

    # --- Backend --------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Start the connection task and wait for the first successful join (or its failure)."""
        await self._wait_for(lambda: self._writer is not None, None)

    async def wait_for_new_state(self) -> Coordinator:
        self._start()
        return await self._inbox.next_state()

    async def send_witness(self, witness: Witness, metadata: WitnessMetadata) -> None:
        await self._send(frame(WitnessMsg.of(witness, metadata), MAX_CLIENT_FRAME))

    async def publish_p2p_addrs(self, addrs: list[str]) -> None:
        """Tell the server where our P2P node listens (re-sent after every reconnect)."""
        self._my_addrs = list(addrs)
        await self._send(frame(P2PAddrsMsg(self._my_addrs), MAX_CLIENT_FRAME))

    def peer_addrs(self) -> dict[bytes, list[str]]:
        """The latest P2P addresses of the run's connected clients, by P2P key."""
        return dict(self._peers)

    async def send_warmup_witness(self, witness: Witness) -> None:
        await self._send(frame(WarmupWitnessMsg.of(witness), MAX_CLIENT_FRAME))

    async def send_health_check(self, checks: HealthCheckEntries) -> None:
        await self._send(frame(HealthCheckMsg.of(checks), MAX_CLIENT_FRAME))

    async def send_checkpoint(self, index: int, checkpoint: Checkpoint) -> None:
        await self._send(frame(CheckpointMsg.of(index, checkpoint), MAX_CLIENT_FRAME))

    async def close(self) -> None:
        self._inbox.closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self._drop_connection()
        await self._inbox.notify()

    async def __aenter__(self) -> CentralizedBackend:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- extras ---------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def next_rejection(self) -> str:
        """The reason of the next ``Error`` the server answered (oldest first)."""
        self._start()
        return await self._inbox.next_rejection()

    # --- internals ------------------------------------------------------------------------------

    def _start(self) -> None:
        self._inbox.raise_if_ended()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"centralized-backend-{self.run_id}")

    async def _wait_for(self, ready: Callable[[], bool], timeout: float | None) -> None:
        self._start()
        cond = self._inbox.cond
        async with cond:
            try:
                async with asyncio.timeout(timeout):
                    await cond.wait_for(lambda: ready() or self._inbox.ended)
            except TimeoutError:
                host, port = self.address
                raise BackendError(f"not connected to the server at {host}:{port}") from None
        self._inbox.raise_if_ended()

    async def _send(self, data: bytes) -> None:
        await self._wait_for(lambda: self._writer is not None, self._send_timeout)
        await self._write(data)

    async def _write(self, data: bytes) -> None:
        async with self._write_lock:
            writer = self._writer
            if writer is None:
                raise BackendError("connection lost before the message was sent")
            try:
                writer.write(data)
                async with asyncio.timeout(self._send_timeout):
                    await writer.drain()
            except (OSError, TimeoutError) as e:
                raise BackendError(f"sending to the server failed: {e or type(e).__name__}") from e

    async def _run(self) -> None:
        failures, last = 0, ""
        try:
            while not self._inbox.closed:
                keepalive: asyncio.Task[None] | None = None
                try:
                    reader = await self._open()
                    failures = 0
                    keepalive = asyncio.create_task(self._keepalive())
                    await self._read_loop(reader)
                    last = "the server closed the connection"
                except (JoinRejectedError, IncompatibleServerError):
                    raise
                except (OSError, TimeoutError, BackendError) as e:
                    last = str(e) or type(e).__name__
                finally:
                    if keepalive is not None:
                        keepalive.cancel()
                    await self._drop_connection()
                if self._inbox.closed:
                    return
                failures += 1
                limit = self._reconnect_attempts if self.connections else self._connect_attempts
                if limit is not None and failures >= limit:
                    raise BackendClosedError(
                        f"server {self.address[0]}:{self.address[1]} unreachable after "
                        f"{failures} attempt(s): {last}"
                    )
                delay = min(self._backoff[1], self._backoff[0] * 2 ** (failures - 1))
                log.warning("centralized server: %s; reconnecting in %.1f s", last, delay)
                await asyncio.sleep(delay)
        except BackendError as e:
            log.error("centralized backend stopped: %s", e)
            await self._inbox.fail(e)
        finally:
            await self._inbox.notify()

    async def _keepalive(self) -> None:
        """Send ``Keepalive`` every ``keepalive_interval`` while joined: the server closes a
        connection that is silent for a minute, and between rounds a client has nothing to say."""
        data = frame(KeepaliveMsg(), MAX_CLIENT_FRAME)
        while True:
            await asyncio.sleep(self._keepalive_interval)
            try:
                await self._write(data)
            except BackendError as e:
                log.info("keepalive not sent: %s", e)  # the read loop sees the connection end
                return

    async def _recv(self, reader: asyncio.StreamReader, timeout: float | None) -> ServerMessage:
        async with asyncio.timeout(timeout):
            data = await read_message(reader, MAX_SERVER_FRAME)
        if data is None:
            raise BackendProtocolError("the server closed the connection")
        return decode_server(data)

    async def _open(self) -> asyncio.StreamReader:
        """Connect, authenticate and join; returns once the server sent its first state."""
        host, port = self.address
        t = self._connect_timeout
        async with asyncio.timeout(t):
            reader, writer = await asyncio.open_connection(host, port)
        try:
            challenge = await self._recv(reader, t)
            if not isinstance(challenge, Challenge):
                raise ProtocolError(f"expected Challenge, got {type(challenge).__name__}")
            if challenge.protocol_version != PROTOCOL_VERSION:
                raise IncompatibleServerError(
                    f"the server speaks protocol version {challenge.protocol_version}, "
                    f"this client {PROTOCOL_VERSION}"
                )
            writer.write(frame(AUTH.answer(self._key, challenge.nonce), MAX_CLIENT_FRAME))
            writer.write(frame(Join(self.run_id), MAX_CLIENT_FRAME))
            if self._my_addrs is not None:
                writer.write(frame(P2PAddrsMsg(self._my_addrs), MAX_CLIENT_FRAME))
            async with asyncio.timeout(t):
                await writer.drain()
            first = await self._recv(reader, t)
            if isinstance(first, JoinRejected):
                raise JoinRejectedError(first.reason)
            if isinstance(first, ErrorMsg):
                raise BackendError(f"the server refused the connection: {first.reason}")
            if not isinstance(first, StateMsg):
                raise ProtocolError(f"expected State after Join, got {type(first).__name__}")
            self._deliver(first, new_connection=True)
        except BaseException:
            writer.close()
            raise
        self._writer = writer
        self.connections += 1
        log.info("joined run %r at %s:%d as %s", self.run_id, host, port, self.identity.hex())
        await self._inbox.notify()
        return reader

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        while True:
            data = await read_message(reader, MAX_SERVER_FRAME)
            if data is None:
                return
            msg = decode_server(data)
            if isinstance(msg, StateMsg):
                self._deliver(msg, new_connection=False)
            elif isinstance(msg, ErrorMsg):
                log.warning("server rejected a message: %s", msg.reason)
                self._inbox.rejections.append(msg.reason)
            elif isinstance(msg, PeersMsg):
                self._peers = {e.key: list(e.addrs) for e in msg.entries}
            else:
                raise ProtocolError(f"unexpected {type(msg).__name__} after joining")
            await self._inbox.notify()

    def _deliver(self, msg: StateMsg, *, new_connection: bool) -> None:
        last = self._last_seq
        if last is not None and msg.seq <= last:
            if not (new_connection and msg.seq < last):
                return
            log.warning(
                "server state sequence went back (%d < %d): server restarted", msg.seq, last
            )
        state = msg.to_coordinator()
        if state.run_id != self.run_id:
            raise ProtocolError(f"the server sent a state of run {state.run_id!r}")
        states = self._inbox.states
        if len(states) == states.maxlen:
            log.warning("dropping an unread coordinator state: the daemon is falling behind")
        states.append(state)
        self._last_seq = msg.seq

    async def _drop_connection(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
