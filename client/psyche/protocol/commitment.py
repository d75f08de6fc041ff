"""SHA-256 helpers and signed payload commitments.

See docs/protocol.md, "Commitments and payload hashing".

A ``Commitment`` is what a trainer gossips before peers download its payload: the payload's
SHA-256 ``data_hash`` and an ed25519 signature over exactly those 32 bytes, made with the sender's
*P2P* key. Peers check the signature against the announcing node's ``p2p_identity`` and, after
download, re-hash the payload and compare. Signing only the hash (not step, round or batch id)
is the reference's choice: the hash itself already covers step and batch id (computed by the
DisTrO payload module, not here), so replaying an old commitment cannot claim a new batch.

The wire form is 96 raw bytes (hash then signature), matching the reference's serde encoding.
``from_bytes`` is strict about length because commitments arrive from untrusted peers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from psyche.protocol.identity import SIGNATURE_LEN, SecretKey, verify_signature

__all__ = [
    "COMMITMENT_LEN",
    "HASH_LEN",
    "Commitment",
    "make_commitment",
    "sha256",
    "sha256v",
    "verify_commitment",
]

HASH_LEN = 32
COMMITMENT_LEN = HASH_LEN + SIGNATURE_LEN


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def sha256v(*parts: bytes) -> bytes:
    """SHA-256 over the concatenation of ``parts`` (no separators, no length prefixes)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.digest()


def _fixed_bytes(name: str, value: object, length: int) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    raw = bytes(value)
    if len(raw) != length:
        raise ValueError(f"{name} must be {length} bytes, got {len(raw)}")
    return raw


@dataclass(frozen=True, slots=True)
class Commitment:
    """A payload hash and the sender's ed25519 signature over it."""

    data_hash: bytes
    """SHA-256 of the payload (32 bytes)."""
    signature: bytes
    """ed25519 signature of ``data_hash`` by the sender's P2P key (64 bytes)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_hash", _fixed_bytes("data_hash", self.data_hash, HASH_LEN))
        object.__setattr__(
            self, "signature", _fixed_bytes("signature", self.signature, SIGNATURE_LEN)
        )

    def to_bytes(self) -> bytes:
        return self.data_hash + self.signature

    @classmethod
    def from_bytes(cls, data: bytes) -> Commitment:
        if len(data) != COMMITMENT_LEN:
            raise ValueError(f"a commitment is {COMMITMENT_LEN} bytes, got {len(data)}")
        raw = bytes(data)
        return cls(data_hash=raw[:HASH_LEN], signature=raw[HASH_LEN:])


def make_commitment(secret: SecretKey, data_hash: bytes) -> Commitment:
    """Sign ``data_hash`` with ``secret`` (the sender's P2P key)."""
    data_hash = _fixed_bytes("data_hash", data_hash, HASH_LEN)
    return Commitment(data_hash=data_hash, signature=secret.sign(data_hash))


def verify_commitment(pub: bytes, commitment: Commitment) -> bool:
    """True iff ``commitment`` was signed by ``pub``; never raises on malformed input."""
    if not isinstance(commitment, Commitment):
        return False
    return verify_signature(pub, commitment.data_hash, commitment.signature)
