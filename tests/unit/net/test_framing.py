"""Frames: limits checked before the payload is read, time limits, and every reader agreeing."""

from __future__ import annotations

import asyncio
import socket

import pytest

from psyche.net.errors import FrameError
from psyche.net.framing import FrameDecoder, encode_frame, frame_header, read_frame, recv_frame


def _reader(data: bytes, *, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


def _read(data: bytes, max_size: int = 100, *, eof: bool = True, **limits: float) -> bytes | None:
    async def go() -> bytes | None:
        return await read_frame(_reader(data, eof=eof), max_size, **limits)

    return asyncio.run(go())


def _kind(data: bytes, max_size: int = 100, *, eof: bool = True, **limits: float) -> str:
    with pytest.raises(FrameError) as e:
        _read(data, max_size, eof=eof, **limits)
    return e.value.kind


def test_frames_round_trip_and_a_clean_end_is_none() -> None:
    assert _read(encode_frame(b"hello")) == b"hello"
    assert _read(encode_frame(b"")) == b""
    assert _read(b"") is None


def test_oversize_is_refused_from_the_header_alone() -> None:
    # No payload follows and the stream stays open: the length alone must end it.
    assert _kind((101).to_bytes(4, "big"), eof=False) == "oversize"
    assert _read(encode_frame(b"x" * 100)) == b"x" * 100
    with pytest.raises(FrameError, match="exceeds the 100-byte limit"):
        encode_frame(b"x" * 101, 100)
    with pytest.raises(FrameError):
        frame_header(101, 100)


def test_a_stream_ending_inside_a_frame_is_truncated() -> None:
    assert _kind(b"\x00\x00") == "truncated"
    assert _kind(encode_frame(b"hello")[:-1]) == "truncated"


def test_silence_and_trickling_hit_their_own_limits() -> None:
    assert _kind(b"", eof=False, idle_timeout=0.05) == "idle_timeout"
    assert _kind(b"\x00\x00", eof=False, frame_timeout=0.05) == "frame_timeout"


def test_blocking_reader_applies_the_same_limits() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(encode_frame(b"abc") + (1000).to_bytes(4, "big"))
        assert recv_frame(b, 100) == b"abc"
        with pytest.raises(FrameError, match="exceeds"):
            recv_frame(b, 100)
        a.sendall(encode_frame(b"abcdef")[:-2])
        a.close()
        with pytest.raises(FrameError, match="connection closed"):
            recv_frame(b, 100)


def test_incremental_decoder_splits_any_chunking_and_refuses_oversize_headers() -> None:
    wire = encode_frame(b"one") + encode_frame(b"") + encode_frame(b"three")
    decoder = FrameDecoder(100)
    frames = [f for i in range(len(wire)) for f in decoder.feed(wire[i : i + 1])]
    assert frames == [b"one", b"", b"three"] and decoder.buffered == 0
    assert decoder.feed(wire[:5]) == [] and decoder.buffered == 5
    with pytest.raises(FrameError) as e:
        FrameDecoder(10).feed((11).to_bytes(4, "big"))
    assert e.value.kind == "oversize"
