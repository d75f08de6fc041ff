"""``TcpService``: handshake time limit, per-address and handshake budgets, faults, close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import msgspec

from psyche.net.codec import MessageDecoder, encode_message_frame
from psyche.net.framing import encode_frame, read_frame
from psyche.net.handshake import ChallengeAuth, ChallengeResponse, challenge_peer
from psyche.net.service import Connection, TcpService
from psyche.protocol.identity import SecretKey
from support.waiting import until

AUTH = ChallengeAuth(b"test-service")
KEY = SecretKey.from_bytes(bytes([3]) * 32)
log = logging.getLogger(__name__)


class Hello(msgspec.Struct, tag=True, frozen=True):
    nonce: bytes


class _Bad(Exception):
    pass


decode_client: MessageDecoder[ChallengeResponse] = MessageDecoder(ChallengeResponse, _Bad, "bad")
decode_server: MessageDecoder[Hello] = MessageDecoder(Hello, _Bad, "bad")


class Echo(TcpService[Connection, bytes]):
    """Authenticates with the handshake, then echoes frames."""

    def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Connection:
        return Connection(reader, writer)

    async def authenticate(self, conn: Connection) -> bytes | None:
        async def send(nonce: bytes) -> None:
            conn.writer.write(encode_message_frame(Hello(nonce), 1024))

        key = await challenge_peer(AUTH, conn.reader, send, decode_client, 1024)
        if key is not None:
            conn.label = key.hex()
        return key

    async def session(self, conn: Connection, identity: bytes) -> None:
        while (frame := await read_frame(conn.reader, 1024)) is not None:
            conn.writer.write(encode_message_frame(Hello(frame), 1024))


@contextlib.asynccontextmanager
async def _serving_echo(
    handshake_timeout: float = 5.0,
    max_connections_per_address: int | None = None,
    max_handshakes: int | None = None,
    max_handshakes_per_address: int | None = None,
) -> AsyncIterator[Echo]:
    service = Echo(
        log,
        handshake_timeout=handshake_timeout,
        max_connections_per_address=max_connections_per_address,
        max_handshakes=max_handshakes,
        max_handshakes_per_address=max_handshakes_per_address,
    )
    await service.start("127.0.0.1", 0)
    try:
        yield service
    finally:
        await service.close()


async def _open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _authenticated(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await _open(port)
    frame = await read_frame(reader, 1024)
    assert frame is not None
    writer.write(encode_message_frame(AUTH.answer(KEY, decode_server(frame).nonce), 1024))
    return reader, writer


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server hung up (frames it sent before are skipped)."""
    try:
        while await asyncio.wait_for(reader.read(1 << 16), 5.0):
            pass
    except ConnectionError:
        pass
    return True


def test_an_authenticated_peer_gets_its_session() -> None:
    async def go() -> None:
        async with _serving_echo() as service:
            reader, writer = await _authenticated(service.port)
            writer.write(encode_frame(b"ping"))
            frame = await read_frame(reader, 1024)
            assert frame is not None and decode_server(frame) == Hello(b"ping")
            writer.close()
            assert service.stats["connections"] == 1 and service.faults.counts == {}

    asyncio.run(go())


def test_a_silent_peer_is_cut_off_at_the_handshake_time_limit() -> None:
    async def go() -> None:
        async with _serving_echo(handshake_timeout=0.2) as service:
            reader, writer = await _open(service.port)
            assert await _closed(reader)
            await until(lambda: service.faults.counts == {"handshake_timeout": 1}, interval=0.01)
            # The limit is the handshake's: an authenticated session may be quiet longer.
            reader, writer = await _authenticated(service.port)
            await asyncio.sleep(0.4)
            writer.write(encode_frame(b"still here"))
            assert await read_frame(reader, 1024) is not None
            writer.close()

    asyncio.run(go())


def test_a_bad_signature_is_a_fault_and_others_are_served() -> None:
    async def go() -> None:
        async with _serving_echo() as service:
            reader, writer = await _open(service.port)
            frame = await read_frame(reader, 1024)
            assert frame is not None
            forged = ChallengeResponse(KEY.public_key(), KEY.sign(decode_server(frame).nonce))
            writer.write(encode_message_frame(forged, 1024))
            assert await _closed(reader)
            await until(lambda: service.faults.counts == {"bad_signature": 1}, interval=0.01)
            reader, writer = await _authenticated(service.port)
            writer.write(encode_frame(b"ok"))
            assert await read_frame(reader, 1024) is not None
            writer.close()

    asyncio.run(go())


def test_connections_per_address_are_bounded() -> None:
    async def go() -> None:
        async with _serving_echo(max_connections_per_address=2) as service:
            held = [await _authenticated(service.port) for _ in range(2)]
            reader, _ = await _open(service.port)
            assert await _closed(reader)
            assert service.faults.counts == {"too_many_connections": 1}
            held.pop()[1].close()  # one leaves: a new connection fits again
            await until(lambda: service.stats["connections"] == 3, interval=0.01)
            await asyncio.sleep(0.1)
            reader, writer = await _authenticated(service.port)
            writer.write(encode_frame(b"ok"))
            assert await read_frame(reader, 1024) is not None
            for _, w in [*held, (reader, writer)]:
                w.close()

    asyncio.run(go())


def test_a_handshake_flood_evicts_its_own_oldest_handshake_not_sessions() -> None:
    async def go() -> None:
        async with _serving_echo(max_handshakes_per_address=2, max_handshakes=2) as service:
            session = await _authenticated(service.port)
            first, second, third = [await _open(service.port) for _ in range(3)]
            assert await _closed(first[0])
            assert service.stats["evicted"] == 1
            # The authenticated session does not count and was not touched.
            session[1].write(encode_frame(b"ok"))
            assert await read_frame(session[0], 1024) is not None
            for _, w in (session, second, third):
                w.close()

    asyncio.run(go())


def test_close_ends_every_connection_at_once() -> None:
    async def go() -> None:
        service = Echo(log, handshake_timeout=5.0)
        await service.start("127.0.0.1", 0)
        session = await _authenticated(service.port)
        session[1].write(encode_frame(b"ok"))
        assert await read_frame(session[0], 1024) is not None
        handshaking = await _open(service.port)
        started = time.monotonic()
        await service.close()
        assert time.monotonic() - started < 2.0
        assert await _closed(session[0]) and await _closed(handshaking[0])
        assert service.faults.counts == {}

    asyncio.run(go())
