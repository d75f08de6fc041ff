"""Centralized wire protocol: frames, every message round trip, strict decoding of hostile input."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import msgspec
import pytest

from psyche.backends.base import BackendError
from psyche.backends.centralized.protocol import (
    AUTH_DOMAIN,
    MAX_CLIENT_FRAME,
    MAX_SERVER_FRAME,
    Challenge,
    ChallengeResponse,
    CheckpointMsg,
    ErrorMsg,
    HealthCheckMsg,
    Join,
    JoinRejected,
    ProtocolError,
    StateMsg,
    WarmupWitnessMsg,
    WitnessMsg,
    auth_message,
    decode_client,
    decode_server,
    encode,
    frame,
    read_message,
)
from psyche.coordinator import state_json as serde
from psyche.coordinator.scripted_clients import sim_identity
from psyche.coordinator.types import EvalResult, Witness, WitnessMetadata
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import Committee, CommitteeProof, WitnessProof
from psyche.protocol.locations import GcsCheckpoint, GcsRepo, HubCheckpoint, HubRepo

from .support import make_coordinator


def _witness() -> Witness:
    pb, bb = Bloom.empty(7), Bloom.empty(2**64 - 1)
    pb.add(b"trainer")
    bb.add(b"payload")
    return Witness(WitnessProof(position=3, index=5, witness=True), pb, bb)


META = WitnessMetadata(
    step=9,
    tokens_per_sec=1.5,
    bandwidth_per_sec=2.0,
    loss=3.25,
    efficiency=0.5,
    evals=(EvalResult(0, 0.25), EvalResult(7, -1.0)),
)

CLIENT_MESSAGES = [
    ChallengeResponse(b"k" * 32, b"s" * 64),
    Join("tiny"),
    Join("ü" * 16),
    WitnessMsg.of(_witness(), META),
    WarmupWitnessMsg.of(_witness()),
    HealthCheckMsg.of([(sim_identity(1), CommitteeProof(Committee.Trainer, 4, 2))]),
    HealthCheckMsg(()),
    CheckpointMsg.of(2, HubCheckpoint(HubRepo(repo_id="org/model", revision="main"))),
]
SERVER_MESSAGES = [
    Challenge(1, bytes(range(32))),
    JoinRejected("run id 'x' does not match this server's run 'tiny'"),
    StateMsg(2**64 - 1, b"{}"),
    ErrorMsg("InvalidWitness: nope"),
]


@pytest.mark.parametrize("msg", CLIENT_MESSAGES, ids=lambda m: type(m).__name__)
def test_client_message_round_trip(msg: Any) -> None:
    assert decode_client(encode(msg)) == msg


@pytest.mark.parametrize("msg", SERVER_MESSAGES, ids=lambda m: type(m).__name__)
def test_server_message_round_trip(msg: Any) -> None:
    assert decode_server(encode(msg)) == msg


def test_witness_values_survive_the_wire() -> None:
    msg = decode_client(encode(WitnessMsg.of(_witness(), META)))
    assert isinstance(msg, WitnessMsg)
    w, m = msg.to_witness()
    assert (w.proof, w.participant_bloom, w.broadcast_bloom) == (
        _witness().proof,
        _witness().participant_bloom,
        _witness().broadcast_bloom,
    )
    assert m == META
    warm = decode_client(encode(WarmupWitnessMsg.of(_witness())))
    assert isinstance(warm, WarmupWitnessMsg)
    assert warm.to_witness().participant_bloom == _witness().participant_bloom


def test_health_check_and_checkpoint_values_survive_the_wire() -> None:
    checks = [(sim_identity(i), CommitteeProof(Committee.Trainer, i + 1, i)) for i in range(3)]
    msg = decode_client(encode(HealthCheckMsg.of(checks)))
    assert isinstance(msg, HealthCheckMsg)
    got = msg.to_checks()
    assert got == checks
    assert [i.p2p_identity for i, _ in got] == [i.p2p_identity for i, _ in checks]
    ck = GcsCheckpoint(GcsRepo(bucket="b", prefix=None))
    cmsg = decode_client(encode(CheckpointMsg.of(1, ck)))
    assert isinstance(cmsg, CheckpointMsg)
    assert (cmsg.index, cmsg.to_checkpoint()) == (1, ck)


def test_state_carries_a_validated_coordinator() -> None:
    c = make_coordinator()
    msg = decode_server(encode(StateMsg(5, serde.to_json(c).encode())))
    assert isinstance(msg, StateMsg)
    assert serde.to_json(msg.to_coordinator()) == serde.to_json(c)
    with pytest.raises(ProtocolError, match="bad coordinator state"):
        StateMsg(1, b'{"run_id": "x"}').to_coordinator()
    with pytest.raises(ProtocolError, match="not valid JSON"):
        StateMsg(1, b"\xff").to_coordinator()


def _raw(tag: str, **fields: Any) -> bytes:
    return msgspec.msgpack.encode({"type": tag, **fields})


_W = {"proof": [1, 1, True], "participant_bloom": b"\0" * 392, "broadcast_bloom": b"\0" * 392}
_META = [1, 0.0, 0.0, 0.0, 0.0, []]
_HEALTH = [b"a" * 32, b"b" * 32, 2, 0, 0]

MALFORMED_CLIENT = {
    "garbage": b"\x93\x01\x02",
    "invalid msgpack": b"\xc1",
    "empty": b"",
    "unknown tag": _raw("Bogus"),
    "server message": encode(ErrorMsg("x")),
    "unknown field": _raw("Join", run_id="tiny", extra=1),
    "missing field": _raw("ChallengeResponse", public_key=b"k" * 32),
    "short key": _raw("ChallengeResponse", public_key=b"k" * 31, signature=b"s" * 64),
    "long signature": _raw("ChallengeResponse", public_key=b"k" * 32, signature=b"s" * 65),
    "empty run id": _raw("Join", run_id=""),
    "run id over 32 bytes": _raw("Join", run_id="é" * 17),
    "short bloom": _raw("WarmupWitness", **{**_W, "broadcast_bloom": b"\0" * 391}),
    "negative index": _raw("WarmupWitness", **{**_W, "proof": [0, -1, False]}),
    "proof not bool": _raw("WarmupWitness", **{**_W, "proof": [0, 0, 1]}),
    "NaN loss": _raw("Witness", **_W, metadata=[1, 0.0, 0.0, math.nan, 0.0, []]),
    "infinite eval": _raw("Witness", **_W, metadata=[1, 0.0, 0.0, 0.0, 0.0, [[0, math.inf]]]),
    "eval task over u8": _raw("Witness", **_W, metadata=[*_META[:5], [[256, 0.0]]]),
    "nine evals": _raw("Witness", **_W, metadata=[*_META[:5], [[0, 0.0]] * 9]),
    "step over u32": _raw("Witness", **_W, metadata=[2**32, *_META[1:]]),
    "bad committee": _raw("HealthCheck", entries=[[*_HEALTH[:2], 3, 0, 0]]),
    "257 health entries": _raw("HealthCheck", entries=[_HEALTH] * 257),
    "checkpoint index over u16": _raw("Checkpoint", index=2**16, checkpoint="{}"),
    "huge checkpoint text": _raw("Checkpoint", index=0, checkpoint="x" * 5000),
}


@pytest.mark.parametrize("data", MALFORMED_CLIENT.values(), ids=MALFORMED_CLIENT.keys())
def test_malformed_client_messages_raise_a_typed_error(data: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_client(data)
    assert isinstance(info.value, BackendError)


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",
        encode(Join("tiny")),
        _raw("State", seq=-1, coordinator_json=b""),
        _raw("Challenge", protocol_version=1, nonce=b"n" * 31),
        _raw("Error", reason="x" * 2000),
    ],
    ids=["garbage", "client message", "negative seq", "short nonce", "long reason"],
)
def test_malformed_server_messages_raise_a_typed_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_server(data)


@pytest.mark.parametrize(
    "text",
    ['{"Hub": {}}', "not json", '{"Bogus": 1}', "[]"],
    ids=["missing", "json", "tag", "list"],
)
def test_undecodable_checkpoint_text_is_a_protocol_error(text: str) -> None:
    msg = decode_client(_raw("Checkpoint", index=0, checkpoint=text))
    assert isinstance(msg, CheckpointMsg)
    with pytest.raises(ProtocolError, match="bad Checkpoint"):
        msg.to_checkpoint()


def test_auth_message_is_domain_separated() -> None:
    assert auth_message(b"n" * 32) == b"psyche-coordinator-auth" + b"n" * 32
    assert AUTH_DOMAIN != b"psyche-data-auth"


# --- frames -------------------------------------------------------------------------------------


def _read(data: bytes, max_size: int, eof: bool = True) -> bytes | None:
    async def go() -> bytes | None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        if eof:
            reader.feed_eof()
        return await read_message(reader, max_size)

    return asyncio.run(go())


def test_frame_is_a_big_endian_length_then_the_payload() -> None:
    data = frame(Join("tiny"), MAX_CLIENT_FRAME)
    payload = encode(Join("tiny"))
    assert data == len(payload).to_bytes(4, "big") + payload
    assert _read(data, MAX_CLIENT_FRAME) == payload
    assert _read(b"", MAX_CLIENT_FRAME) is None


def test_oversize_frame_is_refused_from_its_header_alone() -> None:
    # No payload follows and no EOF: the limit must trip before any payload read is attempted.
    header = (MAX_CLIENT_FRAME + 1).to_bytes(4, "big")
    with pytest.raises(ProtocolError, match="exceeds"):
        _read(header, MAX_CLIENT_FRAME, eof=False)
    assert (
        _read((MAX_CLIENT_FRAME).to_bytes(4, "big") + b"\0" * MAX_CLIENT_FRAME, MAX_CLIENT_FRAME)
        is not None
    )


@pytest.mark.parametrize("data", [b"\0\0", b"\0\0\0\x05abc"], ids=["header", "payload"])
def test_stream_ending_inside_a_frame_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError, match="ended"):
        _read(data, MAX_CLIENT_FRAME)


def test_sender_refuses_frames_the_peer_would_reject() -> None:
    big = StateMsg(1, b"x" * MAX_SERVER_FRAME)
    with pytest.raises(ProtocolError, match="cannot send StateMsg"):
        frame(big, MAX_SERVER_FRAME)
    assert len(frame(StateMsg(1, b"x" * 1000), MAX_SERVER_FRAME)) > 1000


def test_largest_client_messages_fit_the_server_limit() -> None:
    full = [(sim_identity(i), CommitteeProof(Committee.Trainer, i, i)) for i in range(256)]
    assert len(frame(HealthCheckMsg.of(full), MAX_CLIENT_FRAME)) < MAX_CLIENT_FRAME // 2
    meta = WitnessMetadata(step=1, evals=tuple(EvalResult(i, 1.0) for i in range(8)))
    assert len(frame(WitnessMsg.of(_witness(), meta), MAX_CLIENT_FRAME)) < 1024
