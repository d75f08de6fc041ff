"""Length-prefixed frames for the TCP data server (SPEC §6.5).

Each frame is a 4-byte big-endian payload length followed by the payload, as with tokio's
``LengthDelimitedCodec`` in the reference. The length is checked against a hard maximum *before*
any payload byte is read or buffered, so a peer cannot make us allocate by announcing a huge
frame. The limits are asymmetric because the traffic is: requests and handshake messages are a
few hundred bytes (the server accepts at most :data:`MAX_REQUEST_FRAME`), token responses are
large (the client accepts at most :data:`MAX_RESPONSE_FRAME`, the reference's 64 MiB).

Both an asyncio reader (server) and a blocking-socket reader (client) are provided; they share
the wire format and the limit check; the asyncio reader also enforces an idle and a per-frame
time limit. :func:`decode_untrusted` (from :mod:`psyche.protocol.untrusted`, re-exported here) is
the one place where decoding a payload (or text inside one) is made to fail only with the caller's
protocol error type.
"""

from __future__ import annotations

import asyncio
import socket

from psyche.data.provider import DataError
from psyche.protocol.untrusted import decode_untrusted

__all__ = [
    "MAX_REQUEST_FRAME",
    "MAX_RESPONSE_FRAME",
    "FrameError",
    "decode_untrusted",
    "encode_frame",
    "frame_header",
    "read_frame",
    "recv_frame",
]

LENGTH_BYTES = 4
MAX_REQUEST_FRAME = 64 * 1024
MAX_RESPONSE_FRAME = 64 * 1024 * 1024


class FrameError(DataError):
    """The peer broke framing or its time limits; ``kind`` names how, for fault counters.

    Kinds: ``oversize`` (length above the limit), ``truncated`` (stream ended inside a frame),
    ``idle_timeout`` (no frame started in time), ``frame_timeout`` (a started frame did not
    complete in time).
    """

    def __init__(self, message: str, kind: str = "truncated") -> None:
        super().__init__(message)
        self.kind = kind


def _check_length(length: int, max_size: int) -> None:
    if length > max_size:
        raise FrameError(f"frame of {length} bytes exceeds the {max_size}-byte limit", "oversize")


def frame_header(length: int, max_size: int = MAX_RESPONSE_FRAME) -> bytes:
    """The length prefix of a payload of ``length`` bytes sent in pieces after it."""
    _check_length(length, max_size)
    return length.to_bytes(LENGTH_BYTES, "big")


def encode_frame(payload: bytes, max_size: int = MAX_RESPONSE_FRAME) -> bytes:
    """Prefix ``payload`` with its length; refuses payloads the peer would reject."""
    return frame_header(len(payload), max_size) + payload


async def read_frame(
    reader: asyncio.StreamReader,
    max_size: int,
    *,
    idle_timeout: float | None = None,
    frame_timeout: float | None = None,
) -> bytes | None:
    """Next payload; ``None`` on a clean end of stream between frames.

    ``idle_timeout`` bounds the wait for a frame's first byte, ``frame_timeout`` the time from
    that byte to the frame's last one: a peer may be silent between frames, but once it starts a
    frame it must finish it, so a sender trickling a byte at a time cannot hold a connection.
    Raises :class:`FrameError` for an oversize length, an end of stream inside a frame, or either
    limit passing.
    """
    try:
        async with asyncio.timeout(idle_timeout):
            first = await reader.readexactly(1)
    except asyncio.IncompleteReadError:
        return None
    except TimeoutError:
        raise FrameError(f"no frame for {idle_timeout:g} s", "idle_timeout") from None
    try:
        async with asyncio.timeout(frame_timeout):
            head = first + await reader.readexactly(LENGTH_BYTES - 1)
            length = int.from_bytes(head, "big")
            _check_length(length, max_size)
            return await reader.readexactly(length)
    except asyncio.IncompleteReadError as e:
        raise FrameError(f"stream ended inside a frame ({len(e.partial)} bytes read)") from None
    except TimeoutError:
        raise FrameError(
            f"frame not completed within {frame_timeout:g} s", "frame_timeout"
        ) from None


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
