"""Server and client backend in one event loop: sequencing, reconnects, fatal answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest

from psyche.backends.base import Backend, BackendClosedError, BackendError, JoinRejectedError
from psyche.backends.centralized.backend import CentralizedBackend, IncompatibleServerError
from psyche.backends.centralized.protocol import MAX_SERVER_FRAME, Challenge, frame
from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.server import CentralizedServer, ServerOptions
from psyche.coordinator.types import ClientState, RunState, Witness, WitnessMetadata
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.identity import SecretKey

from .support import make_coordinator

KEYS = [SecretKey.from_bytes(bytes([i + 1]) * 32) for i in range(3)]


@contextlib.asynccontextmanager
async def serving(**config: int) -> AsyncIterator[CentralizedServer]:
    hub = RunHost(make_coordinator(**config), first_seq=1000)
    server = CentralizedServer(hub, ServerOptions(host="127.0.0.1", port=0, tick_interval=0.05))
    await server.start()
    ticking = asyncio.create_task(server.serve_forever())
    try:
        yield server
    finally:
        ticking.cancel()
        await server.close()


def _client(
    server: CentralizedServer, i: int, run_id: str = "tiny", reconnect_attempts: int | None = None
) -> CentralizedBackend:
    addr = f"127.0.0.1:{server.port}"
    return CentralizedBackend(
        addr, KEYS[i], run_id, backoff=0.05, reconnect_attempts=reconnect_attempts
    )


async def _next(b: CentralizedBackend, timeout: float = 5.0) -> RunState:
    return (await asyncio.wait_for(b.wait_for_new_state(), timeout)).run_state


def test_backend_implements_the_seam() -> None:
    assert isinstance(CentralizedBackend("127.0.0.1:1", KEYS[0], "tiny"), Backend)
    with pytest.raises(ValueError, match="run_id"):
        CentralizedBackend("127.0.0.1:1", KEYS[0], "x" * 33)


def test_states_arrive_once_in_order_and_survive_a_dropped_connection() -> None:
    async def go() -> None:
        async with serving(init_min_clients=2) as server:
            a = _client(server, 0)
            await a.connect()
            assert await _next(a) is RunState.WaitingForMembers
            # The server drops us: the client reconnects, re-joins, and the state it already
            # has is not delivered again.
            server.connections[a.identity].abort()
            for _ in range(100):
                if a.connections == 2:
                    break
                await asyncio.sleep(0.02)
            assert a.connections == 2
            with pytest.raises(TimeoutError):
                await _next(a, timeout=0.3)
            async with _client(server, 1) as b:
                assert await _next(a) is RunState.Warmup
                assert await _next(b) is RunState.WaitingForMembers
                assert await _next(b) is RunState.Warmup
            await a.close()

    asyncio.run(go())


def test_rejections_reach_the_sender_and_the_run_goes_on() -> None:
    async def go() -> None:
        async with serving(init_min_clients=1) as server, _client(server, 0) as a:
            state = await asyncio.wait_for(a.wait_for_new_state(), 5)
            while state.run_state is not RunState.Warmup:
                state = await asyncio.wait_for(a.wait_for_new_state(), 5)
            bogus = Witness(WitnessProof(0, 0, False), Bloom.empty(), Bloom.empty())
            await a.send_witness(bogus, WitnessMetadata())
            reason = await asyncio.wait_for(a.next_rejection(), 5)
            assert reason.startswith("InvalidRunState")
            await a.send_warmup_witness(bogus)
            assert await _next(a) is RunState.RoundTrain

    asyncio.run(go())


def test_new_connection_with_the_same_key_replaces_the_old_without_withdrawing() -> None:
    async def go() -> None:
        async with serving(init_min_clients=1) as server:
            first = _client(server, 0, reconnect_attempts=1)
            await first.connect()
            while await _next(first) is not RunState.Warmup:
                pass
            async with _client(server, 0) as second:
                for _ in range(100):
                    if not first.connected:
                        break
                    await asyncio.sleep(0.02)
                assert not first.connected
                clients = server.hub.coordinator.epoch_state.clients
                assert [c.state for c in clients] == [ClientState.Healthy]
                assert list(server.hub.pending) == [second.identity]
            await first.close()

    asyncio.run(go())


def test_wrong_run_id_is_fatal_with_the_servers_reason() -> None:
    async def go() -> None:
        async with serving() as server:
            b = _client(server, 0, run_id="x")
            with pytest.raises(JoinRejectedError) as info:
                await b.connect()
            assert info.value.reason == "run id 'x' does not match this server's run 'tiny'"
            with pytest.raises(JoinRejectedError):
                await b.wait_for_new_state()
            with pytest.raises(JoinRejectedError):
                await b.send_warmup_witness(
                    Witness(WitnessProof(0, 0, False), Bloom.empty(), Bloom.empty())
                )
            await b.close()

    asyncio.run(go())


def test_server_speaking_another_version_is_fatal() -> None:
    async def fake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(frame(Challenge(99, b"n" * 32), MAX_SERVER_FRAME))
        await writer.drain()
        await reader.read()
        writer.close()

    async def go() -> None:
        srv = await asyncio.start_server(fake, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        b = CentralizedBackend(f"127.0.0.1:{port}", KEYS[0], "tiny")
        with pytest.raises(IncompatibleServerError, match="version 99"):
            await b.connect()
        await b.close()
        srv.close()

    asyncio.run(go())


def test_unreachable_server_gives_up_and_sends_time_out() -> None:
    async def go() -> None:
        with socket_port() as port:
            addr = f"127.0.0.1:{port}"
            b = CentralizedBackend(addr, KEYS[0], "tiny", backoff=0.2, send_timeout=0.05)
            with pytest.raises(BackendError, match="not connected"):
                await b.send_checkpoint(0, make_coordinator().llm.checkpoint)
            await b.close()
            b = CentralizedBackend(addr, KEYS[0], "tiny", backoff=0.01, connect_attempts=3)
            with pytest.raises(BackendClosedError, match="unreachable after 3 attempt"):
                await b.connect()
            await b.close()
            with pytest.raises(BackendClosedError):
                await b.wait_for_new_state()

    asyncio.run(go())


@contextlib.contextmanager
def socket_port() -> Iterator[int]:
    """A port nobody listens on (bound but not listening, so connections are refused)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def test_silent_peer_is_dropped_after_the_handshake_timeout() -> None:
    async def go() -> None:
        hub = RunHost(make_coordinator())
        options = ServerOptions(host="127.0.0.1", port=0, handshake_timeout=0.2)
        server = CentralizedServer(hub, options)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            rest = await asyncio.wait_for(reader.read(), 5)  # the challenge, then EOF
            assert rest and server.stats["connections"] == 1
            writer.close()
        finally:
            await server.close()

    asyncio.run(go())
