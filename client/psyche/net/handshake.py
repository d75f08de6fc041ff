"""Challenge–response authentication: which ed25519 key does the peer hold?

The server sends a fresh random nonce in its protocol's challenge message; the client answers
with :class:`ChallengeResponse`, its public key and its signature over ``domain ‖ nonce``; the
server verifies it and from then on knows the connection as that key. Each protocol has its own
``domain`` (see ``docs/protocol.md``), so an answer made for one handshake is no valid answer in
another, nor a signature of any other signed message; the fresh nonce prevents replay.

The answer message is the same in every protocol (same tag, same fields), so it is defined once
here and each protocol puts it in the union of what its clients send. The challenge differs (the
centralized server's carries its protocol version), so :func:`challenge_peer` takes a callback
that sends it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

import msgspec

from psyche.net.errors import BadSignature, NetError
from psyche.net.framing import read_frame
from psyche.protocol.identity import SecretKey, verify_signature

__all__ = ["NONCE_LEN", "ChallengeAuth", "ChallengeResponse", "challenge_peer"]

NONCE_LEN = 32

Bytes32 = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
Bytes64 = Annotated[bytes, msgspec.Meta(min_length=64, max_length=64)]


class ChallengeResponse(msgspec.Struct, tag=True, frozen=True, forbid_unknown_fields=True):
    public_key: Bytes32
    signature: Bytes64


@dataclass(frozen=True, slots=True)
class ChallengeAuth:
    """The signing rule of one protocol's handshake."""

    domain: bytes

    def message(self, nonce: bytes) -> bytes:
        """The bytes a client signs to answer ``nonce``."""
        return self.domain + nonce

    def answer(self, key: SecretKey, nonce: bytes) -> ChallengeResponse:
        return ChallengeResponse(key.public_key(), key.sign(self.message(nonce)))

    def check(self, nonce: bytes, answer: ChallengeResponse) -> bytes:
        """The public key that answered ``nonce``; :class:`BadSignature` if it did not."""
        if not verify_signature(answer.public_key, self.message(nonce), answer.signature):
            raise BadSignature()
        return answer.public_key


async def challenge_peer(
    auth: ChallengeAuth,
    reader: asyncio.StreamReader,
    send_challenge: Callable[[bytes], Awaitable[None]],
    decode: Callable[[bytes], object],
    max_frame: int,
) -> bytes | None:
    """The server side: challenge the peer, read its answer, return the key it proved it holds.

    ``None`` if the peer hung up first. Raises :class:`BadSignature`, a
    :class:`~psyche.net.errors.FrameError`, the protocol's decode error, or a ``NetError`` of kind
    ``unexpected`` for another message than the answer. No time limit: the caller bounds the
    whole handshake (see :class:`psyche.net.service.TcpService`).
    """
    nonce = secrets.token_bytes(NONCE_LEN)
    await send_challenge(nonce)
    payload = await read_frame(reader, max_frame)
    if payload is None:
        return None
    answer = decode(payload)
    if not isinstance(answer, ChallengeResponse):
        raise NetError(f"expected ChallengeResponse, got {type(answer).__name__}", "unexpected")
    return auth.check(nonce, answer)
