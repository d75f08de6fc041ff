"""Node identities and ed25519 keys.

See docs/protocol.md, "Coordinator state" and "Commitments and payload hashing".

A ``NodeIdentity`` pairs the key that signs coordinator transactions (``signer``, a Solana wallet
on chain) with the key that signs P2P traffic (``p2p_identity``). Equality and hashing use only
``signer``: the coordinator tracks *wallets*, and a client that restarts with a fresh P2P key is
still the same participant. The flip side is that two identities that differ only in their P2P
key compare equal, so code that needs the P2P key must read it explicitly, never rely on ``==``.

Ed25519 comes from the ``cryptography`` package (OpenSSL), which is constant-time and already a
dependency. Signatures are deterministic (RFC 8032), which is what lets the shared vectors pin
signature bytes. ``verify_signature`` swallows every malformed input and returns ``False``
because its inputs come from untrusted peers; a verifier that can raise is a DoS lever.

Secret key files hold the raw 32-byte seed, or its 64-char hex text for hand-made files; they
are written with mode 0o600. The environment form (``RAW_IDENTITY_SECRET_KEY`` in the reference)
is a hex string and wins over a file, as in the reference client.
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "KEY_LEN",
    "SIGNATURE_LEN",
    "NodeIdentity",
    "SecretKey",
    "secret_key_from_env_or_file",
    "verify_signature",
]

KEY_LEN = 32
SIGNATURE_LEN = 64
_HEX_DIGITS = frozenset(string.hexdigits)


def _as_key_bytes(name: str, value: object) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    raw = bytes(value)
    if len(raw) != KEY_LEN:
        raise ValueError(f"{name} must be {KEY_LEN} bytes, got {len(raw)}")
    return raw


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class NodeIdentity:
    """A participant: wallet key ``signer`` plus P2P key ``p2p_identity`` (32 bytes each)."""

    signer: bytes
    """ed25519 public key that signs coordinator transactions; the identity's equality key."""
    p2p_identity: bytes
    """ed25519 public key of the P2P endpoint; signs commitments and gossip."""

    def __post_init__(self) -> None:
        # Normalise bytes-likes so hashing and equality are stable.
        object.__setattr__(self, "signer", _as_key_bytes("signer", self.signer))
        object.__setattr__(self, "p2p_identity", _as_key_bytes("p2p_identity", self.p2p_identity))

    @classmethod
    def from_single_key(cls, pub: bytes) -> NodeIdentity:
        """Centralized mode: one key plays both roles."""
        return cls(signer=pub, p2p_identity=pub)

    def to_bytes(self) -> bytes:
        """The 64-byte on-chain layout: signer then p2p_identity."""
        return self.signer + self.p2p_identity

    @classmethod
    def from_bytes(cls, data: bytes) -> NodeIdentity:
        if len(data) != 2 * KEY_LEN:
            raise ValueError(f"NodeIdentity needs {2 * KEY_LEN} bytes, got {len(data)}")
        return cls(signer=bytes(data[:KEY_LEN]), p2p_identity=bytes(data[KEY_LEN:]))

    def hex(self) -> str:
        """Short form for logs: the first 8 hex digits of the signer."""
        return self.signer[:4].hex()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeIdentity):
            return NotImplemented
        return self.signer == other.signer

    def __hash__(self) -> int:
        return hash(self.signer)

    def __repr__(self) -> str:
        if self.signer == self.p2p_identity:
            return f"NodeIdentity({self.signer.hex()})"
        return f"NodeIdentity(signer={self.signer.hex()}, p2p_identity={self.p2p_identity.hex()})"


class SecretKey:
    """An ed25519 secret key (32-byte seed). ``repr`` shows only the public key."""

    __slots__ = ("_key",)

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key

    @classmethod
    def generate(cls) -> SecretKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_bytes(cls, seed: bytes) -> SecretKey:
        return cls(Ed25519PrivateKey.from_private_bytes(_as_key_bytes("secret key", seed)))

    @classmethod
    def from_hex(cls, text: str) -> SecretKey:
        text = text.strip()
        if len(text) != 2 * KEY_LEN or not set(text) <= _HEX_DIGITS:
            raise ValueError(f"secret key hex must be {2 * KEY_LEN} hex digits")
        return cls.from_bytes(bytes.fromhex(text))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SecretKey:
        """Read a raw 32-byte seed, or a text file holding its 64 hex digits."""
        data = Path(path).read_bytes()
        if len(data) == KEY_LEN:
            return cls.from_bytes(data)
        try:
            return cls.from_hex(data.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise ValueError(
                f"secret key file {os.fspath(path)!r} must hold 32 raw bytes or 64 hex digits "
                f"(found {len(data)} bytes)"
            ) from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the raw 32-byte seed, readable by the owner only."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            # O_CREAT's mode does not apply to an existing file; tighten it explicitly.
            os.fchmod(fd, 0o600)
            os.write(fd, self.to_bytes())
        finally:
            os.close(fd)

    def to_bytes(self) -> bytes:
        return self._key.private_bytes_raw()

    def public_key(self) -> bytes:
        return self._key.public_key().public_bytes_raw()

    def node_identity(self) -> NodeIdentity:
        """Centralized-mode identity: this key as both signer and P2P key."""
        return NodeIdentity.from_single_key(self.public_key())

    def sign(self, msg: bytes) -> bytes:
        return self._key.sign(bytes(msg))

    def __repr__(self) -> str:
        return f"SecretKey(public={self.public_key().hex()})"


def verify_signature(pub: bytes, msg: bytes, sig: bytes) -> bool:
    """True iff ``sig`` is a valid ed25519 signature of ``msg`` by ``pub``; never raises."""
    try:
        if len(pub) != KEY_LEN or len(sig) != SIGNATURE_LEN:
            return False
        Ed25519PublicKey.from_public_bytes(bytes(pub)).verify(bytes(sig), bytes(msg))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def secret_key_from_env_or_file(path: str | None, env_value: str | None) -> SecretKey:
    """Pick the client's key: hex ``env_value`` first, then the file at ``path``, else random.

    An empty or blank ``env_value`` counts as absent, so ``RAW_IDENTITY_SECRET_KEY=`` in an env
    file does not shadow ``path``.
    """
    if env_value is not None and env_value.strip():
        return SecretKey.from_hex(env_value)
    if path:
        return SecretKey.load(path)
    return SecretKey.generate()
