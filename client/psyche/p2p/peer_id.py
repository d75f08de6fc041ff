"""libp2p peer ids from the client's ed25519 key (docs/protocol.md, "Transport").

A client has one P2P key: ``NodeIdentity.p2p_identity`` on the coordinator, which signs
commitments and announcements. The libp2p host is built from the *same* 32-byte seed, so its
peer id is a pure function of that public key and every peer can map a coordinator client to
the libp2p peer that must have sent its gossip, and back. This is what lets a receiver check
that the libp2p-authenticated originator of a message is the client the message names.

A libp2p ed25519 peer id is the base58btc text of an *identity* multihash (code ``0x00``,
length ``0x24``) over the protobuf ``PublicKey{Type: Ed25519 (1), Data: key}``, i.e. the bytes
``00 24 08 01 12 20 ‖ key`` (36 bytes fit under libp2p's 42-byte inlining limit, so no SHA-256
is involved). That is computed here without libp2p so the asyncio parent never imports it
(importing libp2p takes seconds and pulls in trio); a unit test checks it against libp2p's own
``ID.from_pubkey``. The host child process builds its libp2p key pair from the same seed
(:func:`psyche.p2p.host.main.libp2p_key_pair`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from psyche.protocol.identity import KEY_LEN, secret_key_from_env_or_file

__all__ = [
    "ENV_SECRET_KEY",
    "peer_id_for",
    "public_key_for",
    "show_identity",
]

ENV_SECRET_KEY = "RAW_IDENTITY_SECRET_KEY"
"""Environment twin of ``--identity-secret-key-path``: the key as 64 hex digits."""

# identity multihash (code 0, length 36) ‖ protobuf tag 1 varint 1 (Ed25519) ‖ tag 2 len 32
_PEER_ID_PREFIX = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20])
_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
# base58 of the 38-byte multihash is always 52 characters ("12D3KooW…"); reject anything
# longer before the quadratic big-int decode so hostile strings cost nothing.
_MAX_PEER_ID_CHARS = 64


def _b58encode(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, r = divmod(n, 58)
        out.append(_ALPHABET[r])
    zeros = len(data) - len(data.lstrip(b"\0"))
    return "1" * zeros + "".join(reversed(out))


def _b58decode(text: str) -> bytes:
    n = 0
    for c in text:
        digit = _INDEX.get(c)
        if digit is None:
            raise ValueError(f"invalid base58 character {c!r} in peer id")
        n = n * 58 + digit
    zeros = len(text) - len(text.lstrip("1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * zeros + body


def peer_id_for(public_key: bytes) -> str:
    """The libp2p peer id (base58 text) of an ed25519 public key."""
    if not isinstance(public_key, bytes | bytearray) or len(public_key) != KEY_LEN:
        raise ValueError(f"an ed25519 public key is {KEY_LEN} bytes")
    return _peer_id(bytes(public_key))


@functools.lru_cache(maxsize=4096)
def _peer_id(public_key: bytes) -> str:
    # Base58 is quadratic in the key's length and every download names each member's peer id
    # (issue 38: 44 s of a 64-client round's 305 s profile); a run has at most 256 members.
    return _b58encode(_PEER_ID_PREFIX + public_key)


def public_key_for(peer_id: str) -> bytes:
    """The ed25519 public key inside an inlined peer id; ``ValueError`` for any other kind."""
    if not isinstance(peer_id, str) or not 0 < len(peer_id) <= _MAX_PEER_ID_CHARS:
        raise ValueError("not an ed25519 peer id")
    raw = _b58decode(peer_id)
    if len(raw) != len(_PEER_ID_PREFIX) + KEY_LEN or not raw.startswith(_PEER_ID_PREFIX):
        raise ValueError(f"{peer_id!r} is not an inlined ed25519 peer id")
    return raw[len(_PEER_ID_PREFIX) :]


def show_identity(path: str | None, env: Mapping[str, str]) -> str:
    """Peer id of the key the client would use: ``env[RAW_IDENTITY_SECRET_KEY]``, else ``path``.

    Unlike the client, this refuses to invent a random key: a peer id nobody can reuse is not
    worth printing. ``env`` is passed in because only the CLI reads the process environment.
    """
    env_value = env.get(ENV_SECRET_KEY)
    if not path and not (env_value and env_value.strip()):
        raise ValueError(f"no identity to show: no key file given and {ENV_SECRET_KEY} not set")
    secret = secret_key_from_env_or_file(path, env_value)
    return peer_id_for(secret.public_key())
