"""Signed gossip announcements: the schema of everything peers say on the run's topic.

Gossip carries only small announcements (docs/protocol.md, "Training and publishing",
"Finished and opportunistic witness" and "Gossip"); payloads travel as blobs. An announcement is
one of

* :class:`TrainingResult` — "I trained batch ``[batch_start, batch_end]`` at ``step``; the
  payload's SHA-256 is ``commitment.data_hash`` (signed), fetch blob ``blob_hash`` of
  ``blob_size`` bytes from me or anyone who has it";
* :class:`Finished` — "I am done with ``step``" (``warmup`` for the warmup ready signal),
* :class:`ModelAvailable` — "I hold the model as it was at the end of the epoch that reached
  ``step``; its P2P manifest is blob ``manifest_hash`` of ``manifest_size`` bytes"
  (:mod:`psyche.checkpoint.p2p`),

wrapped in a :class:`SignedAnnouncement` ``{from_key, payload, signature}`` where ``signature``
is ed25519 over ``DOMAIN ‖ payload`` by ``from_key``, the sender's ``NodeIdentity.p2p_identity``.

Two signatures protect a message. libp2p's strict message signing authenticates the libp2p
originator (whose peer id is derived from the same key, see :mod:`psyche.p2p.peer_id`); this
one binds the payload to the coordinator-visible key independently of libp2p internals, and
:func:`open_announcement` insists that both name the same key, so a peer cannot relay another
client's announcement as its own or claim another client's key. The commitment inside a
``TrainingResult`` carries the reference's third signature (over the payload hash only), which
survives being copied into bloom filters and consensus.

Decoding is strict (msgspec: exact types, fixed-size byte fields, integer ranges, no unknown
fields) and size-bounded *before* decoding: nothing a peer sends reaches the daemon unchecked.
Whatever hostile bytes make the decoder raise (deep nesting, invalid UTF-8) is an
:class:`AnnouncementError` (:func:`psyche.protocol.untrusted.decode_untrusted`).
``blob_hash`` is the SHA-256 of the blob bytes as served; with the DisTrO payload it equals
``commitment.data_hash``, but it is a separate field so the transport does not depend on how a
payload's commitment hash is defined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec

from psyche.p2p.errors import AnnouncementError
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.commitment import Commitment, sha256v
from psyche.protocol.identity import SecretKey, verify_signature
from psyche.protocol.untrusted import decode_untrusted

__all__ = [
    "DOMAIN",
    "MAX_ANNOUNCEMENT",
    "Announcement",
    "Finished",
    "ModelAvailable",
    "Payload",
    "SignedAnnouncement",
    "TrainingResult",
    "WireCommitment",
    "gossip_topic",
    "open_announcement",
    "sign_announcement",
]

MAX_ANNOUNCEMENT = 4096
"""Largest gossip message in bytes, as in the reference (docs/protocol.md, "Gossip")."""
DOMAIN = b"psyche-announcement-v1"
"""Signature domain: a signature made for anything else never verifies as an announcement."""

U32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
U64 = Annotated[int, msgspec.Meta(ge=0)]  # msgpack cannot carry more than a u64 anyway
Bytes32 = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
Bytes64 = Annotated[bytes, msgspec.Meta(min_length=64, max_length=64)]


class WireCommitment(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """Wire form of :class:`psyche.protocol.commitment.Commitment`."""

    data_hash: Bytes32
    signature: Bytes64

    @classmethod
    def of(cls, c: Commitment) -> WireCommitment:
        return cls(data_hash=c.data_hash, signature=c.signature)

    def to_commitment(self) -> Commitment:
        return Commitment(data_hash=self.data_hash, signature=self.signature)


class _Payload(msgspec.Struct, tag=True, array_like=True, frozen=True, forbid_unknown_fields=True):
    pass


class TrainingResult(_Payload, frozen=True):
    """A trained batch's commitment and where to fetch its payload."""

    step: U32
    batch_start: U64
    batch_end: U64
    """The batch id is the closed interval ``[batch_start, batch_end]``."""
    commitment: WireCommitment
    blob_hash: Bytes32
    """SHA-256 of the served blob; the fetch key."""
    blob_size: U64
    """Exact blob size in bytes; receivers fetch with ``max_size = blob_size``."""
    nonce: U32
    """Bumped on re-broadcast so gossip de-duplication does not swallow the repeat."""


class Finished(_Payload, frozen=True):
    """The sender finished ``step`` (or, with ``warmup``, finished loading the model)."""

    step: U32
    warmup: bool
    broadcast_merkle: Bytes32 = bytes(32)
    """Merkle root of the previous round's broadcasts (informational).

    See docs/protocol.md, "Known flaws of the reference", flaw 14.
    """


class ModelAvailable(_Payload, frozen=True):
    """The sender serves the model of ``step`` (after a cooldown) for joining clients."""

    step: U32
    manifest_hash: Bytes32
    """SHA-256 of the manifest blob (:mod:`psyche.checkpoint.manifest`)."""
    manifest_size: U64
    nonce: U32
    """Bumped on every re-announcement so gossip de-duplication does not swallow the repeat."""


Payload = TrainingResult | Finished | ModelAvailable


class SignedAnnouncement(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """The gossip message: ``signature = ed25519(from_key, DOMAIN ‖ payload)``."""

    from_key: Bytes32
    payload: Annotated[bytes, msgspec.Meta(max_length=MAX_ANNOUNCEMENT)]
    signature: Bytes64


@dataclass(frozen=True, slots=True)
class Announcement:
    """A verified announcement: ``sender`` is the 32-byte P2P key that signed ``payload``."""

    sender: bytes
    payload: Payload


def gossip_topic(run_id: str) -> str:
    """The run's gossip topic: the reference's ``sha256("psyche gossip" ‖ run_id)``, as hex text
    under a ``psyche/`` prefix, so different runs never share a mesh.

    See docs/protocol.md, "Gossip".
    """
    return "psyche/" + sha256v(b"psyche gossip", run_id.encode()).hex()


_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(SignedAnnouncement)
_payload_decoder = msgspec.msgpack.Decoder(Payload)


def sign_announcement(secret: SecretKey, payload: Payload) -> bytes:
    """Encode and sign ``payload``; raises :class:`AnnouncementError` if it would be oversize."""
    body = _encoder.encode(payload)
    msg = _encoder.encode(
        SignedAnnouncement(
            from_key=secret.public_key(), payload=body, signature=secret.sign(DOMAIN + body)
        )
    )
    if len(msg) > MAX_ANNOUNCEMENT:
        raise AnnouncementError(
            f"announcement is {len(msg)} bytes, over the {MAX_ANNOUNCEMENT}-byte gossip limit"
        )
    return msg


def open_announcement(data: bytes, *, from_peer: str) -> Announcement:
    """Check and decode a gossip message that libp2p says originated at ``from_peer``.

    Raises :class:`AnnouncementError` when ``data`` is oversize or malformed, the signature is
    bad, or the signing key is not the key of ``from_peer``. Membership (is the sender a client
    of this epoch?) and step checks are the caller's; the node already drops gossip from peers
    outside :meth:`P2PNode.set_allowed_peers`.
    """
    if len(data) > MAX_ANNOUNCEMENT:
        raise AnnouncementError(f"announcement of {len(data)} bytes exceeds {MAX_ANNOUNCEMENT}")
    env = decode_untrusted(
        _envelope_decoder.decode, data, AnnouncementError, "malformed announcement envelope"
    )
    if peer_id_for(env.from_key) != from_peer:
        raise AnnouncementError(
            f"announcement signed by {env.from_key.hex()} but published by peer {from_peer}"
        )
    if not verify_signature(env.from_key, DOMAIN + env.payload, env.signature):
        raise AnnouncementError(f"bad announcement signature from {env.from_key.hex()}")
    payload: Payload = decode_untrusted(
        _payload_decoder.decode, env.payload, AnnouncementError, "malformed announcement payload"
    )
    if isinstance(payload, TrainingResult) and payload.batch_end < payload.batch_start:
        raise AnnouncementError(
            f"batch id [{payload.batch_start}, {payload.batch_end}] ends before it starts"
        )
    return Announcement(sender=env.from_key, payload=payload)
