"""Wire protocol between the centralized server and its clients (see ``docs/protocol.md``).

Framing is :mod:`psyche.net.framing`: a 4-byte big-endian length, then one msgpack map encoded by
msgspec and tagged by ``"type"`` (:mod:`psyche.net.codec`). Frame limits are asymmetric because the
traffic is: clients send a witness (≈ 900 bytes) or a health check (≤ 256 entries, ≈ 25 KB), so
the server reads at most :data:`MAX_CLIENT_FRAME` (64 KiB) per frame, checked before the payload
is read; the server sends full coordinator states (≈ 100 KB typical, < 1 MB worst case), so a
client reads at most :data:`MAX_SERVER_FRAME` (8 MiB). A session::

    server → Challenge{protocol_version, nonce: 32 random bytes}
    client → ChallengeResponse{public_key: 32 B, signature: 64 B}
             signature = ed25519(secret, b"psyche-coordinator-auth" ‖ nonce)
    client → Join{run_id}
    server → State{seq, coordinator_json}          (joined; wrong run id: JoinRejected, closed)
    client → Witness | WarmupWitness | HealthCheck | Checkpoint | P2PAddrs  (any time)
    client → Keepalive                              (every 10 s, so silence means a dead peer)
    server → State (whenever the coordinator changed) | Peers | Error{reason} (a message was
             rejected)

After the join the server closes a connection that starts no frame for ``idle_timeout`` (60 s)
or takes longer than ``frame_timeout`` (10 s) from a frame's first byte to its last
(:func:`read_message`); a client's own messages come only with rounds, so it sends ``Keepalive``.
Version 2 added ``Keepalive`` (a version 1 client would be dropped as idle, a version 1 server
would reject the message); a client refuses a server of another version at the challenge.

The handshake is :mod:`psyche.net.handshake` with the domain ``b"psyche-coordinator-auth"``, so
an answer made for the data server's handshake is not valid here, nor the other way round.

Messages carry values, not our Python types: blooms as their 392-byte encoding, identities as raw
keys, a checkpoint as the JSON text of its serde form, the coordinator as its serde JSON
(:mod:`psyche.coordinator.state_json`, the same form as the shared test vectors). JSON rather than a
binary encoding for the state because one schema (with its strict validating decoder) then covers
vectors, saved states and the wire, and the Rust side derives it with serde for free. Decoding is
strict: unknown fields, wrong types, out-of-range integers, wrong-size keys and blooms,
non-finite floats, malformed JSON, invalid UTF-8 or lone surrogates and absurdly deep nesting all
raise :class:`ProtocolError` (through :func:`psyche.protocol.untrusted.decode_untrusted`), never
a bare ``RecursionError`` or ``UnicodeError``.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Annotated

import msgspec

from psyche.backends.base import BackendProtocolError
from psyche.coordinator import state_json as serde
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import (
    MAX_CLIENTS,
    MAX_EVALS,
    EvalResult,
    Verdict,
    Witness,
    WitnessMetadata,
)
from psyche.net.codec import MessageDecoder, encode, encode_message_frame
from psyche.net.errors import NetError
from psyche.net.framing import read_frame
from psyche.net.handshake import ChallengeAuth, ChallengeResponse
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import Committee, CommitteeProof, WitnessProof
from psyche.protocol.coordinator_config import RUN_ID_MAX_LEN
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint
from psyche.protocol.strict_obj import from_obj, to_obj
from psyche.protocol.untrusted import decode_untrusted

__all__ = [
    "AUTH",
    "AUTH_DOMAIN",
    "MAX_CLIENT_FRAME",
    "MAX_SERVER_FRAME",
    "PROTOCOL_VERSION",
    "Challenge",
    "ChallengeResponse",
    "CheckpointMsg",
    "ClientMessage",
    "ErrorMsg",
    "HealthCheckMsg",
    "Join",
    "JoinRejected",
    "KeepaliveMsg",
    "ProtocolError",
    "ServerMessage",
    "StateMsg",
    "WarmupWitnessMsg",
    "WitnessMsg",
    "auth_message",
    "decode_client",
    "decode_server",
    "encode",
    "frame",
    "read_message",
]

PROTOCOL_VERSION = 7
"""2 added `Keepalive`; 3 sends DisTrO payloads in format v2 (`psyche.distro.PAYLOAD_VERSION`),
which a version 2 client cannot read, so the challenge keeps the two apart (docs/protocol.md,
"Payload formats"); 4 serves SparseLoCo audit states as raw values (`STATE_MAGIC` v2), which a
version 3 verifier would take for a trainer's malformed blob; 5 commits to them by BLAKE3, not
SHA-256, which a version 4 verifier could not fetch; 6 ends the SparseLoCo audit trailer in a
probe of inner step 0 (``psyche.distro.audit_probe``), a size a version 5 client refuses; 7 commits
to the inner moments after a round and keeps S_0 as its moments alone (``MOMENTS_MAGIC``), so a
trainer's moments carry over between its rounds, a trailer a version 6 client refuses."""
AUTH_DOMAIN = b"psyche-coordinator-auth"
AUTH = ChallengeAuth(AUTH_DOMAIN)
MAX_CLIENT_FRAME = 64 * 1024
MAX_SERVER_FRAME = 8 * 1024 * 1024
MAX_REASON_LEN = 1024
MAX_CHECKPOINT_TEXT = 2048

U8 = Annotated[int, msgspec.Meta(ge=0, le=2**8 - 1)]
U16 = Annotated[int, msgspec.Meta(ge=0, le=2**16 - 1)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
U64 = Annotated[int, msgspec.Meta(ge=0)]  # msgpack integers cannot exceed u64 anyway
Bytes32 = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
BloomBytes = Annotated[bytes, msgspec.Meta(min_length=Bloom.BYTES_LEN, max_length=Bloom.BYTES_LEN)]
Reason = Annotated[str, msgspec.Meta(max_length=MAX_REASON_LEN)]


class ProtocolError(BackendProtocolError):
    """A frame or message broke the protocol; the message says what was wrong.

    ``kind`` names the fault for the server's counters: ``malformed`` (does not decode or is
    invalid), or a :class:`~psyche.net.errors.NetError` kind (``oversize``, ``truncated``,
    ``idle_timeout``, ``frame_timeout``, ``unexpected``), or one the server sets
    (``rate_limited``).
    """

    def __init__(self, message: str, kind: str = "malformed") -> None:
        super().__init__(message)
        self.kind = kind


def _finite(name: str, x: float) -> None:
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x}")


# --- value structs ------------------------------------------------------------------------------


class _Value(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    pass


class WireWitnessProof(_Value, frozen=True):
    position: U64
    index: U64
    witness: bool


class WireEval(_Value, frozen=True):
    task: U8
    value: float

    def __post_init__(self) -> None:
        _finite("eval value", self.value)


class WireMetadata(_Value, frozen=True):
    step: U32
    tokens_per_sec: float
    bandwidth_per_sec: float
    loss: float
    efficiency: float
    evals: Annotated[tuple[WireEval, ...], msgspec.Meta(max_length=MAX_EVALS)]

    def __post_init__(self) -> None:
        for name in ("tokens_per_sec", "bandwidth_per_sec", "loss", "efficiency"):
            _finite(name, getattr(self, name))


class WireHealthEntry(_Value, frozen=True):
    signer: Bytes32
    p2p_identity: Bytes32
    committee: Committee
    position: U64
    index: U64


# --- messages -----------------------------------------------------------------------------------


class _Msg(msgspec.Struct, tag=True, frozen=True, forbid_unknown_fields=True):
    pass


class Challenge(_Msg, frozen=True):
    protocol_version: U16
    nonce: Bytes32


class Join(_Msg, frozen=True):
    run_id: Annotated[str, msgspec.Meta(min_length=1, max_length=RUN_ID_MAX_LEN)]

    def __post_init__(self) -> None:
        if len(self.run_id.encode()) > RUN_ID_MAX_LEN:
            raise ValueError(f"run_id must be at most {RUN_ID_MAX_LEN} bytes")


class JoinRejected(_Msg, frozen=True):
    reason: Reason


class WitnessMsg(_Msg, frozen=True, tag="Witness", omit_defaults=True):
    """A round witness; a verifier's verdict (docs/protocol.md, "Threat model and result
    verification") rides in the two ``verdict_*`` masks, left out of the encoding when both are
    0, so a witness without one encodes as before this field existed."""

    proof: WireWitnessProof
    participant_bloom: BloomBytes
    broadcast_bloom: BloomBytes
    metadata: WireMetadata
    verdict_checked: U16 = 0
    verdict_mismatch: U16 = 0

    @classmethod
    def of(cls, w: Witness, m: WitnessMetadata) -> WitnessMsg:
        evals = tuple(WireEval(e.task, e.value) for e in m.evals)
        meta = WireMetadata(
            m.step, m.tokens_per_sec, m.bandwidth_per_sec, m.loss, m.efficiency, evals
        )
        p, pb, bb = _witness_fields(w)
        return cls(p, pb, bb, meta, w.verdict.checked, w.verdict.mismatch)

    def to_witness(self) -> tuple[Witness, WitnessMetadata]:
        m = self.metadata
        meta = WitnessMetadata(
            step=m.step,
            tokens_per_sec=m.tokens_per_sec,
            bandwidth_per_sec=m.bandwidth_per_sec,
            loss=m.loss,
            efficiency=m.efficiency,
            evals=tuple(EvalResult(e.task, e.value) for e in m.evals),
        )
        w = _witness(self.proof, self.participant_bloom, self.broadcast_bloom)
        w.verdict = Verdict(self.verdict_checked, self.verdict_mismatch)
        return w, meta


class WarmupWitnessMsg(_Msg, frozen=True, tag="WarmupWitness"):
    proof: WireWitnessProof
    participant_bloom: BloomBytes
    broadcast_bloom: BloomBytes

    @classmethod
    def of(cls, w: Witness) -> WarmupWitnessMsg:
        return cls(*_witness_fields(w))

    def to_witness(self) -> Witness:
        return _witness(self.proof, self.participant_bloom, self.broadcast_bloom)


class HealthCheckMsg(_Msg, frozen=True, tag="HealthCheck"):
    entries: Annotated[tuple[WireHealthEntry, ...], msgspec.Meta(max_length=MAX_CLIENTS)]

    @classmethod
    def of(cls, checks: list[tuple[NodeIdentity, CommitteeProof]]) -> HealthCheckMsg:
        return cls(
            tuple(
                WireHealthEntry(i.signer, i.p2p_identity, p.committee, p.position, p.index)
                for i, p in checks
            )
        )

    def to_checks(self) -> list[tuple[NodeIdentity, CommitteeProof]]:
        return [
            (
                NodeIdentity(e.signer, e.p2p_identity),
                CommitteeProof(e.committee, e.position, e.index),
            )
            for e in self.entries
        ]


class CheckpointMsg(_Msg, frozen=True, tag="Checkpoint"):
    index: U16
    checkpoint: Annotated[str, msgspec.Meta(max_length=MAX_CHECKPOINT_TEXT)]
    """JSON text of the checkpoint's serde form, e.g. ``{"Hub": {"repo_id": "…", …}}``."""

    @classmethod
    def of(cls, index: int, ck: Checkpoint) -> CheckpointMsg:
        return cls(index, json.dumps(to_obj(ck), separators=(",", ":")))

    def to_checkpoint(self) -> Checkpoint:
        return decode_untrusted(
            _parse_checkpoint, self.checkpoint, ProtocolError, "bad Checkpoint message"
        )


class StateMsg(_Msg, frozen=True, tag="State"):
    seq: U64
    """Increases by one per published change; starts from the server's start time (µs) so that a
    restarted server's states are newer than its predecessor's."""
    coordinator_json: bytes

    def to_coordinator(self) -> Coordinator:
        return decode_untrusted(
            serde.from_json,
            self.coordinator_json,
            ProtocolError,
            "bad coordinator state from the server",
        )


class KeepaliveMsg(_Msg, frozen=True, tag="Keepalive"):
    """Sent by a joined client every ``keepalive_interval`` so the server can tell a silent
    client from a dead or stalled connection."""


class ErrorMsg(_Msg, frozen=True, tag="Error"):
    reason: Reason


MAX_P2P_ADDRS = 8
P2PAddr = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class P2PAddrsMsg(_Msg, frozen=True, tag="P2PAddrs"):
    """A client's P2P listen addresses; the coordinator only knows keys, so the server relays
    addresses between the clients of a run (a rendezvous, not part of the coordinator state)."""

    addrs: Annotated[list[P2PAddr], msgspec.Meta(max_length=MAX_P2P_ADDRS)]


class PeerEntry(_Value, frozen=True):
    key: Bytes32
    addrs: Annotated[list[P2PAddr], msgspec.Meta(max_length=MAX_P2P_ADDRS)]


class PeersMsg(_Msg, frozen=True, tag="Peers"):
    """Every connected client's P2P key and addresses."""

    entries: Annotated[list[PeerEntry], msgspec.Meta(max_length=1024)]


ClientMessage = (
    ChallengeResponse
    | Join
    | WitnessMsg
    | WarmupWitnessMsg
    | HealthCheckMsg
    | CheckpointMsg
    | P2PAddrsMsg
    | KeepaliveMsg
)
ServerMessage = Challenge | JoinRejected | StateMsg | ErrorMsg | PeersMsg


def _parse_checkpoint(text: str) -> Checkpoint:
    ck: Checkpoint = from_obj(Checkpoint, json.loads(text), "checkpoint")
    return ck


def _witness_fields(w: Witness) -> tuple[WireWitnessProof, bytes, bytes]:
    p = w.proof
    proof = WireWitnessProof(p.position, p.index, p.witness)
    return proof, w.participant_bloom.to_bytes(), w.broadcast_bloom.to_bytes()


def _witness(proof: WireWitnessProof, participants: bytes, broadcasts: bytes) -> Witness:
    # Lengths were checked by the decoder and every u64 word is a valid bloom word, so this
    # cannot fail on decoded input.
    return Witness(
        WitnessProof(proof.position, proof.index, proof.witness),
        Bloom.from_bytes(participants),
        Bloom.from_bytes(broadcasts),
    )


# --- codec --------------------------------------------------------------------------------------

decode_client: MessageDecoder[ClientMessage] = MessageDecoder(
    ClientMessage, ProtocolError, "malformed client message"
)
decode_server: MessageDecoder[ServerMessage] = MessageDecoder(
    ServerMessage, ProtocolError, "malformed server message"
)
auth_message = AUTH.message


def frame(msg: msgspec.Struct, max_size: int) -> bytes:
    """``msg`` as one length-prefixed frame; refuses what the peer's limit would reject."""
    try:
        return encode_message_frame(msg, max_size)
    except NetError as e:
        raise ProtocolError(f"cannot send {type(msg).__name__}: {e}") from None


async def read_message(
    reader: asyncio.StreamReader,
    max_size: int,
    *,
    idle_timeout: float | None = None,
    frame_timeout: float | None = None,
) -> bytes | None:
    """The next frame's payload, ``None`` on a clean end of stream between frames.

    ``idle_timeout`` bounds the wait for a frame to start, ``frame_timeout`` the time a started
    frame may take (see :func:`psyche.net.framing.read_frame`); either passing is a
    :class:`ProtocolError` of that kind.
    """
    try:
        return await read_frame(
            reader, max_size, idle_timeout=idle_timeout, frame_timeout=frame_timeout
        )
    except NetError as e:
        raise ProtocolError(str(e), e.kind) from None
