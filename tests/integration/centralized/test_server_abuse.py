"""A real server on 127.0.0.1 and real TCP clients: one abusive peer must cost only itself.

The server runs in this process (its rate limits and connection budgets are options that the CLI
does not expose); every client is a raw socket speaking the wire protocol, so the tests count
exactly which frames each connection receives.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from psyche.backends.centralized.protocol import (
    MAX_CLIENT_FRAME,
    MAX_SERVER_FRAME,
    Challenge,
    ChallengeResponse,
    ErrorMsg,
    Join,
    P2PAddrsMsg,
    PeersMsg,
    ProtocolError,
    ServerMessage,
    StateMsg,
    WarmupWitnessMsg,
    _Msg,
    auth_message,
    decode_server,
    frame,
    read_message,
)
from psyche.coordinator import ClientState, Coordinator, RunState, Witness
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.identity import NodeIdentity, SecretKey
from support.centralized import serving_centralized
from support.waiting import until


def _key(i: int) -> SecretKey:
    return SecretKey.from_bytes(bytes([i]) * 32)


class _Peer:
    """An authenticated raw connection recording every frame the server sends it."""

    def __init__(
        self, key: SecretKey, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.identity = NodeIdentity.from_single_key(key.public_key())
        self.writer = writer
        self.frames: list[ServerMessage] = []
        self.closed = False
        self._reading = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while (data := await read_message(reader, MAX_SERVER_FRAME)) is not None:
                self.frames.append(decode_server(data))
        except (OSError, ProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed = True

    def send(self, msg: _Msg) -> None:
        self.writer.write(frame(msg, MAX_CLIENT_FRAME))

    def count(self, kind: type) -> int:
        return sum(isinstance(f, kind) for f in self.frames)

    def state(self) -> Coordinator | None:
        states = [f for f in self.frames if isinstance(f, StateMsg)]
        return states[-1].to_coordinator() if states else None

    async def close(self) -> None:
        self.writer.close()
        self._reading.cancel()
        with contextlib.suppress(BaseException):
            await self._reading


async def _join(port: int, key: SecretKey) -> _Peer:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = await asyncio.wait_for(read_message(reader, MAX_SERVER_FRAME), 5)
    assert data is not None, "closed before the challenge"
    challenge = decode_server(data)
    assert isinstance(challenge, Challenge)
    signature = key.sign(auth_message(challenge.nonce))
    writer.write(frame(ChallengeResponse(key.public_key(), signature), MAX_CLIENT_FRAME))
    writer.write(frame(Join("tiny"), MAX_CLIENT_FRAME))
    return _Peer(key, reader, writer)


def test_a_p2p_addrs_burst_from_one_key_drops_only_that_key(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving_centralized(tmp_path, peers_interval=0.2) as server:
            honest = [await _join(server.port, _key(i)) for i in (1, 2, 3)]
            for i, h in enumerate(honest):
                h.send(P2PAddrsMsg([f"/ip4/127.0.0.1/tcp/{4000 + i}"]))

            def warm(p: _Peer) -> bool:
                s = p.state()
                return s is not None and s.run_state is RunState.Warmup

            await until(lambda: all(warm(h) for h in honest), "the epoch to start")
            await until(
                lambda: all(
                    any(isinstance(f, PeersMsg) and len(f.entries) == 3 for f in h.frames)
                    for h in honest
                ),
                "every honest client to see the three peers",
            )
            abuser = await _join(server.port, _key(9))
            await until(lambda: abuser.count(StateMsg) > 0, "the abuser to join")
            before = [h.count(PeersMsg) for h in honest]

            # 72 frames (about 3.6 KB) in one write: they arrive in one read on the server.
            burst = b"".join(
                frame(P2PAddrsMsg([f"/ip4/10.0.0.{i}/tcp/{4000 + i}"]), MAX_CLIENT_FRAME)
                for i in range(72)
            )
            assert len(burst) < 2**16, "one StreamReader buffer"
            abuser.writer.write(burst)
            await until(lambda: abuser.closed or any(h.closed for h in honest), "a drop")
            await asyncio.sleep(0.6)  # a few peer-list intervals for any further fallout

            dropped = sum(h.closed for h in honest)
            peer_frames = [h.count(PeersMsg) - n for h, n in zip(honest, before, strict=True)]
            print(f"honest dropped: {dropped}; peer-list frames per honest client: {peer_frames}")
            assert dropped == 0, f"{dropped} honest connections dropped by one key's burst"
            assert all(n <= 3 for n in peer_frames), f"peer lists not coalesced: {peer_frames}"
            assert abuser.closed, "the abuser was not cut off"
            errors = [f.reason for f in abuser.frames if isinstance(f, ErrorMsg)]
            assert errors and "rate limit" in errors[-1]
            assert set(server.connections) == {h.identity for h in honest}
            es = server.hub.coordinator.epoch_state
            assert [c.state for c in es.clients] == [ClientState.Healthy] * 3, "withdrawn"

            # The honest connections still get peer-list and state updates.
            honest[0].send(P2PAddrsMsg(["/ip4/127.0.0.1/tcp/5000"]))
            await until(
                lambda: all(
                    isinstance(f := h.frames[-1], PeersMsg)
                    and any("/ip4/127.0.0.1/tcp/5000" in e.addrs for e in f.entries)
                    for h in honest
                    if h.frames
                ),
                "the new peer list",
            )
            states = [h.count(StateMsg) for h in honest]
            s = honest[0].state()
            assert s is not None
            index = s.index_of(honest[0].identity)
            assert index is not None
            proof = WitnessProof(index, index, False)
            honest[0].send(WarmupWitnessMsg.of(Witness(proof, Bloom.empty(), Bloom.empty())))
            await until(
                lambda: all(h.count(StateMsg) > n for h, n in zip(honest, states, strict=True)),
                "a state update after the warmup witness",
            )
            assert not any(h.closed for h in honest)
            for p in (*honest, abuser):
                await p.close()

    asyncio.run(asyncio.wait_for(scenario(), 10))


@pytest.mark.parametrize(
    "budget",
    [
        {"max_handshakes_per_address": 4, "max_handshakes": 64},
        {"max_handshakes_per_address": 64, "max_handshakes": 4},
    ],
    ids=["per-address", "total"],
)
def test_idle_unauthenticated_sockets_cannot_lock_out_a_client(
    tmp_path: Path, budget: dict[str, int]
) -> None:
    async def scenario() -> None:
        async with serving_centralized(
            tmp_path, init_min_clients=2, max_connections=8, **budget
        ) as server:
            idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(24)]
            # Every idle socket has been accepted (and counted) before the honest client comes.
            await until(lambda: server.stats["connections"] >= 24, "the idle sockets")
            honest = await _join(server.port, _key(1))
            await until(lambda: honest.count(StateMsg) > 0 or honest.closed, "the honest join", 3)
            errors = [f.reason for f in honest.frames if isinstance(f, ErrorMsg)]
            print(f"honest client: joined={not honest.closed}, errors={errors}")
            assert not honest.closed and not errors, f"honest client refused: {errors}"
            assert honest.identity in server.connections
            assert server.stats["evicted"] >= 24 - 4

            # Joined clients have their own budget: handshakes do not count against it ...
            others = [await _join(server.port, _key(i)) for i in range(2, 9)]
            await until(lambda: len(server.connections) == 8, "eight joined clients")
            # ... and it is still enforced once a key authenticates.
            extra = await _join(server.port, _key(20))
            await until(lambda: extra.closed, "the ninth client to be refused")
            assert [f.reason for f in extra.frames if isinstance(f, ErrorMsg)] == [
                "too many clients (8)"
            ]
            for p in (honest, *others, extra):
                await p.close()
            for _, w in idle:
                w.close()

    asyncio.run(asyncio.wait_for(scenario(), 10))
