"""Hostile bytes must fail the P2P decoders with their typed P2P error, never anything else.

Before the fix, the control-frame decoders (:func:`decode_host`, :func:`decode_parent`) and the
announcement payload decoder caught only ``MsgspecError``: nesting that msgspec has to descend
into escaped as ``RecursionError`` and invalid UTF-8 in a string (an encoded lone surrogate
included) as ``UnicodeDecodeError``. A gossip payload is signed, but by any key a peer likes, so
a signed payload is as hostile as raw bytes. Every case here is a few kilobytes at most, under
the frame and gossip limits that are checked before decoding.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from psyche.p2p import control
from psyche.p2p.errors import AnnouncementError, ControlError
from psyche.p2p.messages import (
    DOMAIN,
    MAX_ANNOUNCEMENT,
    Finished,
    open_announcement,
    sign_announcement,
)
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.identity import SecretKey

KEY = SecretKey.from_bytes(b"\x11" * 32)
PEER = peer_id_for(KEY.public_key())
DEPTH = 3000  # a few KB: fits a gossip message; Python's recursion limit is 1000
SURROGATE = b"\xed\xa0\x80"  # U+D800 encoded as UTF-8: invalid in msgpack strings


def _str(s: bytes) -> bytes:
    assert len(s) < 32
    return bytes([0xA0 | len(s)]) + s


def _map(*items: bytes) -> bytes:
    assert len(items) % 2 == 0 and len(items) < 32
    return bytes([0x80 | len(items) // 2]) + b"".join(items)


DEEP_ARRAYS = b"\x91" * DEPTH + b"\xc0"
DEEP_MAPS = b"\x81\xc0" * DEPTH + b"\xc0"

# Control messages are maps tagged by "type"; msgspec must skip or inspect whatever comes before
# the tag, which is where nesting hurts.
CONTROL = {
    "deep arrays": DEEP_ARRAYS,
    "deep maps": DEEP_MAPS,
    "deep unknown field before the tag": _map(_str(b"x"), DEEP_ARRAYS, _str(b"type"), _str(b"Ack")),
    "deep map before the tag": _map(_str(b"x"), DEEP_MAPS, _str(b"type"), _str(b"Shutdown")),
    "deep known field before the tag": _map(
        _str(b"req_id"), DEEP_ARRAYS, _str(b"type"), _str(b"Ack")
    ),
    "invalid UTF-8 tag": _map(_str(b"type"), _str(SURROGATE)),
    "invalid UTF-8 field": _map(_str(b"type"), _str(b"Failed"), _str(b"error"), _str(SURROGATE)),
    "invalid UTF-8 field name": _map(_str(b"type"), _str(b"Shutdown"), _str(SURROGATE), b"\xc0"),
    "wrong tag type": _map(_str(b"type"), b"\x01"),
    "wrong field type": _map(_str(b"type"), _str(b"Ack"), _str(b"req_id"), _str(b"1")),
    "negative id": _map(_str(b"type"), _str(b"CancelFetch"), _str(b"req_id"), b"\xff"),
    "huge array length": b"\xdd\xff\xff\xff\xff",
    "huge map length": b"\xdf\xff\xff\xff\xff",
    "huge string length": _map(_str(b"type"), b"\xdb\xff\xff\xff\xff"),
    "huge bin length": _map(
        _str(b"type"), _str(b"Publish"), _str(b"data"), b"\xc6\xff\xff\xff\xff"
    ),
    "truncated": _map(_str(b"type"), _str(b"Ack"))[:-2],
    "not msgpack": b"\xc1\xc1\xc1",
}
DECODERS: dict[str, Callable[[bytes], object]] = {
    "parent side": control.decode_host,
    "host side": control.decode_parent,
}


@pytest.mark.parametrize("payload", CONTROL.values(), ids=CONTROL.keys())
@pytest.mark.parametrize("decode", DECODERS.values(), ids=DECODERS.keys())
def test_hostile_control_frame_is_a_control_error(
    decode: Callable[[bytes], object], payload: bytes
) -> None:
    with pytest.raises(ControlError) as e:
        decode(payload)
    assert type(e.value) is ControlError
    assert e.value.__cause__ is None and e.value.__suppress_context__
    str(e.value).encode("utf-8")  # the reason goes into a log line


def test_deep_control_frame_is_reported_as_such() -> None:
    with pytest.raises(ControlError, match="nested too deeply"):
        control.decode_parent(CONTROL["deep unknown field before the tag"])


def test_honest_control_frames_still_decode() -> None:
    honest: list[tuple[Callable[[bytes], object], object]] = [
        (control.decode_host, control.Ack(7, None)),
        (control.decode_host, control.Failed("port in use")),
        (control.decode_parent, control.Shutdown()),
    ]
    for decode, msg in honest:
        assert isinstance(msg, control.Ack | control.Failed | control.Shutdown)
        (payload,) = control.FrameDecoder().feed(control.encode_frame(msg))
        assert decode(payload) == msg


def _signed(payload: bytes, key: SecretKey = KEY) -> bytes:
    """A correctly signed envelope around arbitrary payload bytes."""
    data = msgspec.msgpack.encode([key.public_key(), payload, key.sign(DOMAIN + payload)])
    assert len(data) <= MAX_ANNOUNCEMENT
    return data


# Announcement payloads are tagged arrays: [tag, field, ...].
PAYLOADS = {
    "deep arrays": DEEP_ARRAYS,
    "deep in a field": b"\x94" + _str(b"Finished") + b"\x01" + DEEP_ARRAYS[:-1] + b"\xc0\x00",
    "invalid UTF-8 tag": b"\x93" + _str(SURROGATE) + b"\x01\xc2",
    "wrong tag type": b"\x93\x01\x01\xc2",
    "huge array length": b"\xdd\xff\xff\xff\xff",
    "huge bin length": b"\x94" + _str(b"Finished") + b"\x01\xc2\xc6\xff\xff\xff\xff",
    "unknown variant": b"\x93" + _str(b"Nope") + b"\x01\xc2",
}


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_hostile_signed_payload_is_an_announcement_error(payload: bytes) -> None:
    with pytest.raises(AnnouncementError) as e:
        open_announcement(_signed(payload), from_peer=PEER)
    assert type(e.value) is AnnouncementError
    str(e.value).encode("utf-8")


ENVELOPES = {
    "deep arrays": DEEP_ARRAYS,
    "deep maps": DEEP_MAPS,
    "deep key": b"\x93" + DEEP_ARRAYS,
    "invalid UTF-8 string as key": b"\x93" + _str(SURROGATE) + b"\xc4\x00\xc4\x00",
    "huge array length": b"\xdd\xff\xff\xff\xff",
    "huge bin length": b"\x93\xc6\xff\xff\xff\xff",
}


@pytest.mark.parametrize("data", ENVELOPES.values(), ids=ENVELOPES.keys())
def test_hostile_envelope_is_an_announcement_error(data: bytes) -> None:
    with pytest.raises(AnnouncementError) as e:
        open_announcement(data, from_peer=PEER)
    assert type(e.value) is AnnouncementError


def test_honest_announcement_still_opens() -> None:
    ann = open_announcement(sign_announcement(KEY, Finished(4, False)), from_peer=PEER)
    assert ann.sender == KEY.public_key() and ann.payload == Finished(4, False)
