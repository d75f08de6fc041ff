"""One P2P key per wallet against a real ``psyche centralized-server run`` process (issue 12,
finding 4).

A centralized client's identity is the key that answers the server's challenge, used as both
wallet and P2P key, so claiming another client's P2P key means answering the challenge with that
key. Here a second wallet tries it while the victim is joined: the server refuses it with a clear
reason, and the victim goes on into training as the only holder of its key. (The hub's own rule,
``Coordinator.claim_p2p_key``, is unit-tested in ``tests/unit/coordinator/test_p2p_identity.py``;
the Solana program's in ``programs/psyche-coordinator/tests/program_p2p_identity.rs``.)
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from psyche.backends.centralized.protocol import (
    MAX_CLIENT_FRAME,
    MAX_SERVER_FRAME,
    Challenge,
    ChallengeResponse,
    ErrorMsg,
    Join,
    StateMsg,
    auth_message,
    decode_server,
    frame,
    read_message,
)
from psyche.coordinator import ClientState, RunState, WitnessMetadata
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


async def _claim(port: int, attacker: SecretKey, victim_key: bytes) -> list[object]:
    """Join as ``victim_key`` (signing with the attacker's own key); every frame until the close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    frames: list[object] = []
    try:
        data = await asyncio.wait_for(read_message(reader, MAX_SERVER_FRAME), 10)
        assert data is not None
        challenge = decode_server(data)
        assert isinstance(challenge, Challenge)
        signature = attacker.sign(auth_message(challenge.nonce))
        writer.write(frame(ChallengeResponse(victim_key, signature), MAX_CLIENT_FRAME))
        writer.write(frame(Join("tiny"), MAX_CLIENT_FRAME))
        while (
            data := await asyncio.wait_for(read_message(reader, MAX_SERVER_FRAME), 10)
        ) is not None:
            frames.append(decode_server(data))
    finally:
        writer.close()
    return frames


def test_a_second_wallet_cannot_take_a_joined_clients_p2p_key(
    tmp_path: Path, reap_children: Procs
) -> None:
    port = free_port()
    start_server(reap_children, write_state(tmp_path / "state.toml"), port, log=tmp_path / "log")
    attacker = SecretKey.from_bytes(b"\x03" * 32)

    async def scenario() -> None:
        async with backend(port, 1) as victim:
            s = await victim.wait_for_new_state()
            assert s.run_state is RunState.WaitingForMembers
            frames = await _claim(port, attacker, victim.identity.p2p_identity)
            assert not any(isinstance(f, StateMsg) for f in frames), "the claim was let in"
            assert [f.reason for f in frames if isinstance(f, ErrorMsg)] == [
                "bad challenge signature"
            ]
            async with backend(port, 2) as bystander:
                s = await wait_state(victim, in_state(RunState.Warmup))
                ids = [c.id for c in s.epoch_state.clients]
                assert ids == [victim.identity, bystander.identity]
                holders = [i for i in ids if i.p2p_identity == victim.identity.p2p_identity]
                assert holders == [victim.identity]
                await victim.send_warmup_witness(warmup_witness(s, victim))
                s = await wait_state(victim, in_state(RunState.RoundTrain))
                # The victim trains: the round's elected witness reports, the round moves on and
                # the victim is still a healthy client of the epoch.
                voter = next(x for x in (victim, bystander) if round_witness(s, x).proof.witness)
                await voter.send_witness(round_witness(s, voter), WitnessMetadata(step=1))
                s = await wait_state(victim, in_state(RunState.RoundWitness))
                index = s.index_of(victim.identity)
                assert index is not None
                assert s.epoch_state.clients[index].state is ClientState.Healthy
            assert victim.connections == 1, "the victim was never disconnected"

    asyncio.run(scenario())
