"""Length-prefixed frames for the TCP data server (SPEC §6.5).

Each frame is a 4-byte big-endian payload length followed by the payload, as with tokio's
``LengthDelimitedCodec`` in the reference. The length is checked against a hard maximum *before*
any payload byte is read or buffered, so a peer cannot make us allocate by announcing a huge
frame. The limits are asymmetric because the traffic is: requests and handshake messages are a
few hundred bytes (the server accepts at most :data:`MAX_REQUEST_FRAME`), token responses are
large (the client accepts at most :data:`MAX_RESPONSE_FRAME`, the reference's 64 MiB).

Both an asyncio reader (server) and a blocking-socket reader (client) are provided; they share
the wire format and the limit check.
"""

from __future__ import annotations

import asyncio
import socket

from psyche.data.provider import DataError

__all__ = [
    "MAX_REQUEST_FRAME",
    "MAX_RESPONSE_FRAME",
    "FrameError",
    "encode_frame",
    "read_frame",
    "recv_frame",
]

LENGTH_BYTES = 4
MAX_REQUEST_FRAME = 64 * 1024
MAX_RESPONSE_FRAME = 64 * 1024 * 1024


class FrameError(DataError):
    """The peer broke framing: an oversize length, or the stream ended inside a frame."""


def _check_length(length: int, max_size: int) -> None:
    if length > max_size:
        raise FrameError(f"frame of {length} bytes exceeds the {max_size}-byte limit")


def encode_frame(payload: bytes, max_size: int = MAX_RESPONSE_FRAME) -> bytes:
    """Prefix ``payload`` with its length; refuses payloads the peer would reject."""
    _check_length(len(payload), max_size)
    return len(payload).to_bytes(LENGTH_BYTES, "big") + payload


async def read_frame(reader: asyncio.StreamReader, max_size: int) -> bytes | None:
    """Next payload; ``None`` on a clean end of stream between frames.

    Raises :class:`FrameError` for an oversize length or an end of stream inside a frame.
    """
    try:
        head = await reader.readexactly(LENGTH_BYTES)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise FrameError("stream ended inside a frame header") from None
    length = int.from_bytes(head, "big")
    _check_length(length, max_size)
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as e:
        raise FrameError(f"stream ended after {len(e.partial)} of {length} bytes") from None


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise FrameError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def recv_frame(sock: socket.socket, max_size: int) -> bytes:
    """Blocking read of the next payload (the socket's timeout applies to each ``recv``)."""
    length = int.from_bytes(_recv_exactly(sock, LENGTH_BYTES), "big")
    _check_length(length, max_size)
    return _recv_exactly(sock, length)
