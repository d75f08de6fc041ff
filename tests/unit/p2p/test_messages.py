"""Signed announcements: round trips, and everything a hostile peer could send is rejected."""

from __future__ import annotations

import msgspec
import pytest

from psyche.p2p.errors import AnnouncementError
from psyche.p2p.messages import (
    DOMAIN,
    MAX_ANNOUNCEMENT,
    Finished,
    SignedAnnouncement,
    TrainingResult,
    WireCommitment,
    gossip_topic,
    open_announcement,
    sign_announcement,
)
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.commitment import make_commitment, sha256, verify_commitment
from psyche.protocol.identity import SecretKey

ALICE, BOB = SecretKey.from_bytes(bytes([1]) * 32), SecretKey.from_bytes(bytes([2]) * 32)
ALICE_PEER = peer_id_for(ALICE.public_key())


def result(step: int = 3, **kw: object) -> TrainingResult:
    h = sha256(b"payload")
    fields: dict[str, object] = dict(
        step=step,
        batch_start=40,
        batch_end=49,
        commitment=WireCommitment.of(make_commitment(ALICE, h)),
        blob_hash=h,
        blob_size=1234,
        nonce=7,
    )
    fields.update(kw)
    return TrainingResult(**fields)  # type: ignore[arg-type]


def envelope(payload: bytes, key: SecretKey = ALICE, sig: bytes | None = None) -> bytes:
    sig = key.sign(DOMAIN + payload) if sig is None else sig
    return msgspec.msgpack.encode(SignedAnnouncement(key.public_key(), payload, sig))


@pytest.mark.parametrize(
    "payload", [result(), Finished(step=0, warmup=True), Finished(5, False, bytes([9]) * 32)]
)
def test_round_trip(payload: TrainingResult | Finished) -> None:
    data = sign_announcement(ALICE, payload)
    assert len(data) < 400  # far below the 4096-byte gossip limit
    ann = open_announcement(data, from_peer=ALICE_PEER)
    assert ann.sender == ALICE.public_key() and ann.payload == payload
    if isinstance(ann.payload, TrainingResult):
        assert verify_commitment(ann.sender, ann.payload.commitment.to_commitment())


def test_sender_must_be_the_publishing_peer() -> None:
    data = sign_announcement(ALICE, result())
    with pytest.raises(AnnouncementError, match="published by peer"):
        open_announcement(data, from_peer=peer_id_for(BOB.public_key()))


def test_tampered_payload_or_signature_is_rejected() -> None:
    body = msgspec.msgpack.encode(result())
    good = envelope(body)
    open_announcement(good, from_peer=ALICE_PEER)
    tampered = msgspec.msgpack.encode(result(step=4))
    forged = envelope(tampered, sig=ALICE.sign(DOMAIN + body))
    with pytest.raises(AnnouncementError, match="bad announcement signature"):
        open_announcement(forged, from_peer=ALICE_PEER)
    # A signature over the bare payload (no domain) is not an announcement signature.
    with pytest.raises(AnnouncementError, match="signature"):
        open_announcement(envelope(body, sig=ALICE.sign(body)), from_peer=ALICE_PEER)


def _raw_payload(fields: list[object]) -> bytes:
    return msgspec.msgpack.encode(fields)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (["TrainingResult", 2**32, 0, 9, [bytes(32), bytes(64)], bytes(32), 1, 0], "payload"),
        (["TrainingResult", -1, 0, 9, [bytes(32), bytes(64)], bytes(32), 1, 0], "payload"),
        (["TrainingResult", 1, 0, 9, [bytes(31), bytes(64)], bytes(32), 1, 0], "payload"),
        (["TrainingResult", 1, 0, 9, [bytes(32), bytes(64)], bytes(33), 1, 0], "payload"),
        (["TrainingResult", 1, 0, 9, [bytes(32), bytes(64)], bytes(32), 1], "payload"),
        (["TrainingResult", 1, 0, 9, [bytes(32), bytes(64)], bytes(32), 1, 0, 5], "payload"),
        (["TrainingResult", 1, 9, 0, [bytes(32), bytes(64)], bytes(32), 1, 0], "ends before"),
        (["Finished", 1, "yes"], "payload"),
        (["Witness", 1], "payload"),
        ("not a list", "payload"),
    ],
)
def test_malformed_payloads_are_rejected(fields: list[object], match: str) -> None:
    with pytest.raises(AnnouncementError, match=match):
        open_announcement(envelope(_raw_payload(fields)), from_peer=ALICE_PEER)


def test_malformed_envelopes_and_oversize_are_rejected() -> None:
    with pytest.raises(AnnouncementError, match="exceeds"):
        open_announcement(b"\x93" + bytes(MAX_ANNOUNCEMENT), from_peer=ALICE_PEER)
    for junk in (b"", b"\xc1", msgspec.msgpack.encode([bytes(31), b"", bytes(64)])):
        with pytest.raises(AnnouncementError, match="envelope"):
            open_announcement(junk, from_peer=ALICE_PEER)


def test_gossip_topic_is_per_run_and_stable() -> None:
    assert gossip_topic("run") == gossip_topic("run") != gossip_topic("run2")
    assert gossip_topic("run") == "psyche/" + sha256(b"psyche gossiprun").hex()
