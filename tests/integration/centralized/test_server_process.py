"""A real ``psyche centralized-server run`` process with real client backends in this process.

Each scenario starts its own server subprocess on a free 127.0.0.1 port (``reap_children`` kills
it afterwards) with short phase times, so a whole epoch takes seconds.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from psyche.backends.base import JoinRejectedError
from psyche.backends.centralized.protocol import (
    MAX_CLIENT_FRAME,
    Challenge,
    ChallengeResponse,
    ErrorMsg,
    Join,
    auth_message,
    decode_server,
    frame,
)
from psyche.coordinator import ClientState, Coordinator, RunState, WitnessMetadata
from psyche.data.server_messages import RejectReason
from psyche.data.tcp_client import DataRequestRejected, TcpDataProvider
from psyche.protocol.data_selection import assign_data_for_state
from psyche.protocol.identity import SecretKey
from support.net import free_port

from .helpers import (
    backend,
    in_state,
    round_witness,
    start_server,
    wait_state,
    warmup_witness,
    write_state,
)

pytestmark = pytest.mark.slow
Procs = list[subprocess.Popen[bytes]]


async def _challenge(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = await reader.readexactly(4)
    msg = decode_server(await reader.readexactly(int.from_bytes(head, "big")))
    assert isinstance(msg, Challenge)
    return reader, writer, msg.nonce


async def _dropped_with(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
    """The server's last words before closing: the reason of its Error frame."""
    rest = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert len(rest) >= 4, "expected an Error frame before the close"
    msg = decode_server(rest[4 : 4 + int.from_bytes(rest[:4], "big")])
    assert isinstance(msg, ErrorMsg)
    return msg.reason


async def _hostile_connections(port: int) -> None:
    reader, writer, _ = await _challenge(port)
    writer.write(b"\x00\x00\x00\x03abc")
    assert "malformed client message" in await _dropped_with(reader, writer)

    reader, writer, _ = await _challenge(port)
    writer.write((1 << 20).to_bytes(4, "big"))
    assert "exceeds the 65536-byte limit" in await _dropped_with(reader, writer)

    reader, writer, _ = await _challenge(port)
    key = SecretKey.from_bytes(b"m" * 32)
    forged = key.sign(auth_message(bytes(32)))
    writer.write(frame(ChallengeResponse(key.public_key(), forged), MAX_CLIENT_FRAME))
    assert await _dropped_with(reader, writer) == "bad challenge signature"

    reader, writer, _ = await _challenge(port)
    writer.write(frame(Join("tiny"), MAX_CLIENT_FRAME))
    assert "expected ChallengeResponse, got Join" in await _dropped_with(reader, writer)

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(reader.read(), 10)  # closed, whatever it said
    writer.close()


def test_hostile_connections_are_dropped_while_joined_clients_keep_receiving_states(
    tmp_path: Path, reap_children: Procs
) -> None:
    port = free_port()
    start_server(reap_children, write_state(tmp_path / "state.toml"), port, log=tmp_path / "log")

    async def scenario() -> None:
        async with backend(port, 1) as a:
            assert (await a.wait_for_new_state()).run_state is RunState.WaitingForMembers
            stranger = backend(port, 3, run_id="x")
            with pytest.raises(JoinRejectedError) as info:
                await stranger.connect()
            assert info.value.reason == "run id 'x' does not match this server's run 'tiny'"
            await stranger.close()
            await _hostile_connections(port)
            async with backend(port, 2) as b:
                s = await wait_state(a, in_state(RunState.Warmup))
                assert [c.id for c in s.epoch_state.clients] == [a.identity, b.identity]
                await wait_state(b, in_state(RunState.Warmup))
            assert a.connections == 1, "the good client was never disconnected"

    asyncio.run(scenario())
    log = (tmp_path / "log").read_text()
    for reason in ("bad challenge signature", "exceeds the 65536-byte limit", "join refused"):
        assert reason in log, f"no log line for {reason!r}"


def test_clients_warm_up_into_training_a_non_witness_is_refused_and_a_disconnect_withdraws(
    tmp_path: Path, reap_children: Procs
) -> None:
    port = free_port()
    start_server(reap_children, write_state(tmp_path / "state.toml"), port, log=tmp_path / "log")

    async def scenario() -> None:
        async with backend(port, 1) as a, backend(port, 2) as b:
            s = await wait_state(a, in_state(RunState.Warmup))
            await a.send_warmup_witness(warmup_witness(s, a))
            s = await wait_state(b, in_state(RunState.RoundTrain))
            elected = [x for x in (a, b) if round_witness(s, x).proof.witness]
            assert len(elected) == 1, "witness_nodes = 1"
            voter = elected[0]
            bystander = b if voter is a else a
            await bystander.send_witness(round_witness(s, bystander), WitnessMetadata(step=1))
            reason = await asyncio.wait_for(bystander.next_rejection(), 10)
            assert reason.startswith("InvalidWitness")
            await voter.send_witness(round_witness(s, voter), WitnessMetadata(step=1))
            await wait_state(bystander, in_state(RunState.RoundWitness))
            await bystander.close()
            gone = bystander.identity
            s = await wait_state(
                voter,
                lambda s: any(
                    c.id == gone and c.state is ClientState.Withdrawn
                    for c in s.epoch_state.clients + s.epoch_state.exited_clients
                ),
            )

    asyncio.run(scenario())


def _data_toml(tmp_path: Path) -> Path:
    (tmp_path / "tokens").mkdir()
    (tmp_path / "tokens" / "a.bin").write_bytes(np.arange(256 * 16, dtype="<u2").tobytes())
    path = tmp_path / "data.toml"
    path.write_text('dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = 16\n')
    return path


async def _fetch(data_port: int, key: SecretKey, s: Coordinator) -> torch.Tensor | RejectReason:
    """Ask the run's data server for the first interval assigned this round."""
    rnd = s.current_round()
    ids = [c.id for c in s.epoch_state.clients]
    got = assign_data_for_state(
        ids,
        s.committee_selection(rnd),
        rnd.data_index,
        s.batch_size_for_round(rnd),
        rnd.random_seed,
        rnd.retries,
    )
    with TcpDataProvider(f"127.0.0.1:{data_port}", key, 16, retries=0) as data:
        try:
            return await asyncio.to_thread(data.get_samples, next(iter(got)))
        except DataRequestRejected as e:
            return e.reason


def test_restarted_server_restores_epoch_and_step_and_serves_data_to_members_only(
    tmp_path: Path, reap_children: Procs
) -> None:
    port, data_port = free_port(), free_port()
    state = write_state(
        tmp_path / "state.toml",
        data_location=f'{{ Server = "127.0.0.1:{data_port}" }}',
        init_min_clients=1,
        warmup_time=3,
        max_round_train_time=3,
        epoch_time=4,
    )
    saved = tmp_path / "saved"
    args = ("--save-state-dir", str(saved), "--data-config", str(_data_toml(tmp_path)))
    server = start_server(reap_children, state, port, *args, log=tmp_path / "log")

    async def scenario() -> None:
        async with backend(port, 1, max_backoff=0.5) as c:
            s = await wait_state(c, in_state(RunState.Warmup))
            await c.send_warmup_witness(warmup_witness(s, c))
            s = await wait_state(c, in_state(RunState.RoundTrain))
            tokens = await _fetch(data_port, SecretKey.from_bytes(bytes([1]) * 32), s)
            assert isinstance(tokens, torch.Tensor) and tokens.shape[1] == 16
            stranger = SecretKey.from_bytes(b"s" * 32)
            assert await _fetch(data_port, stranger, s) is RejectReason.NotInThisRound
            # The elected witness (the only client) ends each round until the epoch winds down.
            while s.progress.epoch == 0:
                if s.run_state is RunState.RoundTrain and round_witness(s, c).proof.witness:
                    await c.send_witness(round_witness(s, c), WitnessMetadata())
                s = await wait_state(c, lambda _: True)
            step = s.progress.step
            assert [p.name for p in saved.iterdir()] == [f"tiny-step{step}.json"]

            server.kill()  # a crash: only what was saved at the epoch end survives
            await asyncio.to_thread(server.wait, 10)
            await asyncio.to_thread(
                start_server, reap_children, state, port, *args, log=tmp_path / "log"
            )
            s = await wait_state(c, lambda s: not s.epoch_state.clients, timeout=30)
            assert (s.progress.epoch, s.progress.step) == (1, step)
            assert s.run_state is RunState.WaitingForMembers
            assert c.connections == 2, "the same backend reconnected and joined again"
            s = await wait_state(c, in_state(RunState.Warmup))
            assert [x.id for x in s.epoch_state.clients] == [c.identity]

    asyncio.run(scenario())
