"""After the join, a connection that trickles a frame or goes silent is closed; honest clients,
which send keepalives, are not, and losing the bad ones costs only them.

Before the fix the server had no frame or idle limit once a client had joined: a sender of one
byte a second (or one that sent nothing at all) kept its connection, and its place in the epoch,
for as long as it liked. The server runs in this process so the test can shorten its limits and
read its fault counters; every client is a real TCP connection, the honest ones real
:class:`CentralizedBackend` instances.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

import pytest

from psyche.backends.centralized.backend import CentralizedBackend
from psyche.backends.centralized.protocol import (
    MAX_CLIENT_FRAME,
    MAX_SERVER_FRAME,
    Challenge,
    ChallengeResponse,
    ErrorMsg,
    Join,
    KeepaliveMsg,
    ProtocolError,
    ServerMessage,
    StateMsg,
    auth_message,
    decode_server,
    frame,
    read_message,
)
from psyche.coordinator import ClientState, RunState
from psyche.protocol.identity import NodeIdentity, SecretKey
from support.centralized import serving_centralized
from support.waiting import until

IDLE_S = 2.0
FRAME_S = 1.0
KEEPALIVE_S = 0.4


def _key(i: int) -> SecretKey:
    return SecretKey.from_bytes(bytes([i]) * 32)


class _RawPeer:
    """A joined raw connection whose every byte after the join the test controls."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.frames: list[ServerMessage] = []
        self.closed_at: float | None = None
        self._reading = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while (data := await read_message(reader, MAX_SERVER_FRAME)) is not None:
                self.frames.append(decode_server(data))
        except (OSError, ProtocolError):
            pass
        finally:
            self.closed_at = time.monotonic()

    def errors(self) -> list[str]:
        return [f.reason for f in self.frames if isinstance(f, ErrorMsg)]

    async def close(self) -> None:
        self.writer.close()
        self._reading.cancel()
        with contextlib.suppress(BaseException):
            await self._reading


async def _join(port: int, key: SecretKey) -> _RawPeer:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = await asyncio.wait_for(read_message(reader, MAX_SERVER_FRAME), 5)
    assert data is not None
    challenge = decode_server(data)
    assert isinstance(challenge, Challenge)
    signature = key.sign(auth_message(challenge.nonce))
    writer.write(frame(ChallengeResponse(key.public_key(), signature), MAX_CLIENT_FRAME))
    writer.write(frame(Join("tiny"), MAX_CLIENT_FRAME))
    return _RawPeer(reader, writer)


def test_trickling_and_silent_members_are_closed_and_cost_only_themselves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="psyche.backends.centralized.server")

    async def scenario() -> None:
        async with serving_centralized(
            tmp_path, init_min_clients=4, idle_timeout=IDLE_S, frame_timeout=FRAME_S
        ) as server:
            addr = f"127.0.0.1:{server.port}"
            honest = [
                CentralizedBackend(addr, _key(i), "tiny", keepalive_interval=KEEPALIVE_S)
                for i in (1, 2)
            ]
            for h in honest:
                await h.connect()
            trickler, silent = await _join(server.port, _key(3)), await _join(server.port, _key(4))
            bad = {
                NodeIdentity.from_single_key(_key(i).public_key()): p
                for i, p in ((3, trickler), (4, silent))
            }

            # Until all four are in the epoch, the raw peers keep themselves alive by hand.
            keepalive = frame(KeepaliveMsg(), MAX_CLIENT_FRAME)

            def warm() -> bool:
                c = server.hub.coordinator
                return c.run_state is RunState.Warmup and len(c.epoch_state.clients) == 4

            deadline = time.monotonic() + 10
            while not warm():
                assert time.monotonic() < deadline, "the epoch did not start with all four"
                for p in (trickler, silent):
                    p.writer.write(keepalive)
                await asyncio.sleep(IDLE_S / 4)

            # The trickler starts a valid 20-byte frame and sends one byte every quarter second
            # (5 s for the frame); the silent peer sends nothing from now on.
            started = time.monotonic()
            for byte in keepalive:
                if trickler.closed_at is not None:
                    break
                trickler.writer.write(bytes([byte]))
                await asyncio.sleep(0.25)
            await until(lambda: silent.closed_at is not None, "the silent peer to be closed", 10.0)

            assert trickler.closed_at is not None, "a trickled frame was still being read"
            took = trickler.closed_at - started
            assert FRAME_S <= took < FRAME_S + 2.0, f"trickler closed after {took:.2f} s"
            assert any("frame not completed within 1 s" in r for r in trickler.errors())
            assert any("no frame for 2 s" in r for r in silent.errors())
            assert server.faults.counts == {"frame_timeout": 1, "idle_timeout": 1}

            # Honest clients stayed joined through several idle limits, on their first
            # connection, and they alone are still healthy members.
            await asyncio.sleep(2 * IDLE_S)
            assert all(h.connected and h.connections == 1 for h in honest)
            assert set(server.connections) == {h.identity for h in honest}
            states = {c.id: c.state for c in server.hub.coordinator.epoch_state.clients}
            assert [states[h.identity] for h in honest] == [ClientState.Healthy] * 2
            assert all(states.get(who) is not ClientState.Healthy for who in bad)
            # The honest clients got the state that records the withdrawals.
            await until(
                lambda: all(h._last_seq == server.hub.seq for h in honest), "the latest state", 10.0
            )

            for h in honest:
                await h.close()
            for p in (trickler, silent):
                await p.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
    faults = [r.getMessage() for r in caplog.records if "only counted" in r.getMessage()]
    assert len(faults) == 2, faults  # one line per peer, no traceback
    assert not [r for r in caplog.records if r.exc_info]


async def _joined(port: int, key: SecretKey) -> _RawPeer:
    peer = await _join(port, key)
    await until(lambda: any(isinstance(f, StateMsg) for f in peer.frames), "the join", 10.0)
    return peer


async def _dropped(peer: _RawPeer) -> None:
    await until(lambda: peer.closed_at is not None, "the drop", 10.0)
    await peer.close()


def test_garbage_from_one_key_is_logged_once_and_counted_per_kind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="psyche.backends.centralized.server")

    async def scenario() -> None:
        async with serving_centralized(tmp_path, init_min_clients=4) as server:
            for _ in range(5):
                peer = await _joined(server.port, _key(7))
                # A message only the server sends: it does not decode as a client message.
                peer.writer.write(frame(Challenge(2, bytes(32)), MAX_CLIENT_FRAME))
                await _dropped(peer)
            other = await _joined(server.port, _key(8))
            other.writer.write(b"\x00\x00\x00\x03\xc1\xc1\xc1")
            await _dropped(other)
            assert server.faults.counts == {"malformed": 6}
            key7 = NodeIdentity.from_single_key(_key(7).public_key()).hex()
            assert server.faults.of(key7, "malformed") == 5

    asyncio.run(asyncio.wait_for(scenario(), 30))
    faults = [r.getMessage() for r in caplog.records if "only counted" in r.getMessage()]
    assert len(faults) == 2, faults  # one per key, not one per connection
