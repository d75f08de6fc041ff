"""Hostile bytes must fail the decoders with their typed protocol error, never anything else.

msgspec and json recurse once per nesting level and do not check UTF-8 the way the schemas do, so
before the fix a few kilobytes of nesting escaped as ``RecursionError`` and invalid UTF-8 or lone
surrogates as ``UnicodeError``, which the servers' read loops log as internal errors with a
traceback per frame.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from psyche.backends.centralized import protocol
from psyche.backends.centralized.protocol import CheckpointMsg, ProtocolError, StateMsg
from psyche.data import server_messages
from psyche.data.server_messages import WireError

DEPTH = 100_000
DEEP_ARRAYS = b"\x91" * DEPTH + b"\xc0"
DEEP_MAPS = b"\x81\xc0" * DEPTH + b"\xc0"  # {nil: {nil: …}}


def _str(s: bytes) -> bytes:
    assert len(s) < 32
    return bytes([0xA0 | len(s)]) + s


def _map(*items: bytes) -> bytes:
    assert len(items) % 2 == 0 and len(items) < 32
    return bytes([0x80 | len(items) // 2]) + b"".join(items)


# Typed decoding rejects a bare deep array at its first byte; the nesting must sit where msgspec
# has to skip or look at a value before it knows the message type.
HOSTILE = {
    "deep arrays": DEEP_ARRAYS,
    "deep maps": DEEP_MAPS,
    "deep unknown field before the tag": _map(_str(b"x"), DEEP_ARRAYS, _str(b"type"), _str(b"J")),
    "deep map field before the tag": _map(_str(b"x"), DEEP_MAPS, _str(b"type"), _str(b"J")),
    "deep known field before the tag": _map(
        _str(b"nonce"), DEEP_ARRAYS, _str(b"type"), _str(b"Challenge")
    ),
    "invalid UTF-8 tag": _map(_str(b"type"), _str(b"\xed\xa0\x80")),  # an encoded surrogate
}

DECODERS: dict[str, tuple[Callable[[bytes], object], type[Exception]]] = {
    "data client": (server_messages.decode_client, WireError),
    "data server": (server_messages.decode_server, WireError),
    "centralized client": (protocol.decode_client, ProtocolError),
    "centralized server": (protocol.decode_server, ProtocolError),
}


@pytest.mark.parametrize("payload", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("decoder", DECODERS.values(), ids=DECODERS.keys())
def test_hostile_msgpack_is_a_typed_error(
    decoder: tuple[Callable[[bytes], object], type[Exception]], payload: bytes
) -> None:
    decode, error = decoder
    with pytest.raises(error) as e:
        decode(payload)
    assert type(e.value) is error
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_deep_nesting_is_reported_as_such() -> None:
    with pytest.raises(ProtocolError, match="nested too deeply"):
        protocol.decode_client(HOSTILE["deep unknown field before the tag"])


def test_invalid_utf8_in_a_field_is_a_typed_error() -> None:
    join = _map(_str(b"type"), _str(b"Join"), _str(b"run_id"), _str(b"\xed\xa0\x80"))
    with pytest.raises(ProtocolError):
        protocol.decode_client(join)


CHECKPOINTS = {
    "deep arrays": "[" * DEPTH,
    "deep objects": '{"Hub":' * DEPTH,
    "deep inside a variant": '{"Hub":{"repo_id":' + "[" * DEPTH,
    "lone surrogate variant": '"\\ud800"',
    "lone surrogate repo id": '{"Hub":{"repo_id":"\\ud800","revision":null}}',
    "lone surrogate revision": '{"Hub":{"repo_id":"a/b","revision":"\\udfff"}}',
    "lone surrogate P2P repo id": '{"P2P":{"repo_id":"\\ud800"}}',
    "lone surrogate Gcs prefix": '{"Gcs":{"bucket":"b","prefix":"\\ud800"}}',
}


@pytest.mark.parametrize("text", CHECKPOINTS.values(), ids=CHECKPOINTS.keys())
def test_hostile_checkpoint_json_is_a_protocol_error(text: str) -> None:
    msg = protocol.decode_client(protocol.encode(CheckpointMsg(0, text[:2048])))
    assert isinstance(msg, CheckpointMsg)
    with pytest.raises(ProtocolError) as e:
        msg.to_checkpoint()
    # The reason goes into a log line and back to the peer in an Error frame: it must encode.
    str(e.value).encode("utf-8")
    protocol.encode(protocol.ErrorMsg(str(e.value)[:1000]))


def test_hostile_checkpoint_beyond_the_wire_limit_is_a_protocol_error() -> None:
    # The wire caps the text at 2048 characters; the method must not rely on that.
    with pytest.raises(ProtocolError, match="nested too deeply"):
        CheckpointMsg(0, "[" * DEPTH).to_checkpoint()


@pytest.mark.parametrize("text", [b"[" * DEPTH, b'"\xed\xa0\x80"', b'"\\ud800"'])
def test_hostile_coordinator_state_is_a_protocol_error(text: bytes) -> None:
    with pytest.raises(ProtocolError):
        StateMsg(1, text).to_coordinator()


def test_honest_checkpoint_still_decodes() -> None:
    text = '{"Hub":{"repo_id":"a/b","revision":null}}'
    ck = CheckpointMsg(3, text).to_checkpoint()
    assert CheckpointMsg.of(3, ck).checkpoint == text


def test_decode_untrusted_makes_a_surrogate_reason_safe() -> None:
    from psyche.protocol.untrusted import decode_untrusted

    def boom(_: str) -> None:
        raise ValueError("bad \ud800")

    with pytest.raises(WireError) as e:
        decode_untrusted(boom, "", WireError, "what")
    assert str(e.value) == "what: bad \\ud800"


def test_decode_untrusted_leaves_other_errors_alone() -> None:
    from psyche.protocol.untrusted import decode_untrusted

    def bug(_: str) -> None:
        raise KeyError("a bug, not hostile input")

    with pytest.raises(KeyError):
        decode_untrusted(bug, "", WireError, "what")
