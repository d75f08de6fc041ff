"""The challenge–response: only a signature by the named key over this nonce and domain passes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest

from psyche.net.codec import MessageDecoder, encode
from psyche.net.errors import BadSignature, FrameError, NetError
from psyche.net.framing import encode_frame
from psyche.net.handshake import ChallengeAuth, ChallengeResponse, challenge_peer
from psyche.protocol.identity import SecretKey

AUTH = ChallengeAuth(b"test-auth")
ALICE = SecretKey.from_bytes(bytes([1]) * 32)
MALLORY = SecretKey.from_bytes(bytes([2]) * 32)


class Other(msgspec.Struct, tag=True, frozen=True):
    x: int


class _Bad(Exception):
    pass


decode: MessageDecoder[ChallengeResponse | Other] = MessageDecoder(
    ChallengeResponse | Other, _Bad, "bad message"
)


def _run(answer: Callable[[bytes], bytes], max_frame: int = 1024) -> bytes | None:
    """Runs the server side; ``answer(nonce)`` is what the peer sends back (then it hangs up)."""

    async def go() -> bytes | None:
        reader = asyncio.StreamReader()

        async def send_challenge(nonce: bytes) -> None:
            assert len(nonce) == 32
            reader.feed_data(answer(nonce))
            reader.feed_eof()

        return await challenge_peer(AUTH, reader, send_challenge, decode, max_frame)

    return asyncio.run(go())


def _framed(msg: msgspec.Struct) -> bytes:
    return encode_frame(encode(msg))


def test_an_honest_answer_names_its_key() -> None:
    assert _run(lambda nonce: _framed(AUTH.answer(ALICE, nonce))) == ALICE.public_key()


def test_nonces_are_fresh() -> None:
    seen: list[bytes] = []

    def answer(nonce: bytes) -> bytes:
        seen.append(nonce)
        return _framed(AUTH.answer(ALICE, nonce))

    _run(answer)
    _run(answer)
    assert seen[0] != seen[1]


def test_a_signature_by_another_key_is_refused() -> None:
    def forged(nonce: bytes) -> bytes:
        signature = MALLORY.sign(AUTH.message(nonce))
        return _framed(ChallengeResponse(ALICE.public_key(), signature))

    with pytest.raises(BadSignature) as e:
        _run(forged)
    assert e.value.kind == "bad_signature"


@pytest.mark.parametrize(
    "signed",
    [
        lambda nonce: AUTH.message(bytes(32)),  # another challenge (replay)
        lambda nonce: nonce,  # the bare nonce, without the domain
        lambda nonce: ChallengeAuth(b"other-auth").message(nonce),  # another protocol's domain
    ],
    ids=["wrong-challenge", "no-domain", "other-domain"],
)
def test_a_signature_over_anything_but_this_challenge_is_refused(
    signed: Callable[[bytes], bytes],
) -> None:
    with pytest.raises(BadSignature):
        _run(
            lambda nonce: _framed(ChallengeResponse(ALICE.public_key(), ALICE.sign(signed(nonce))))
        )


def test_another_message_garbage_or_an_oversize_frame_is_refused() -> None:
    with pytest.raises(NetError) as e:
        _run(lambda nonce: _framed(Other(1)))
    assert e.value.kind == "unexpected"
    with pytest.raises(_Bad, match="bad message"):
        _run(lambda nonce: encode_frame(b"\xc1"))
    with pytest.raises(FrameError) as f:
        _run(lambda nonce: _framed(AUTH.answer(ALICE, nonce)), max_frame=10)
    assert f.value.kind == "oversize"


def test_a_peer_hanging_up_is_no_identity() -> None:
    assert _run(lambda nonce: b"") is None
