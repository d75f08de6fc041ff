"""Length-prefixed frames: a 4-byte big-endian payload length, then the payload.

This is the framing of every protocol of the client (tokio's ``LengthDelimitedCodec`` in the
reference). The length is checked against the caller's maximum *before* any payload byte is read
or buffered, so a peer cannot make us allocate by announcing a huge frame; each protocol picks
its own, usually asymmetric, limits.

Three readers share the format and the limit check: an asyncio one for servers and clients
(which also enforces an idle and a per-frame time limit), a blocking-socket one for synchronous
clients, and an incremental :class:`FrameDecoder` for transports that hand over arbitrary chunks
(the trio end of the P2P control socket).
"""

from __future__ import annotations

import asyncio
import socket

from psyche.net.errors import FrameError

__all__ = [
    "LENGTH_BYTES",
    "MAX_FRAME",
    "FrameDecoder",
    "FrameError",
    "encode_frame",
    "frame_header",
    "read_frame",
    "recv_frame",
]

LENGTH_BYTES = 4
MAX_FRAME = 64 * 1024 * 1024
"""The largest frame any of our protocols accepts (data server responses); others are lower."""


def check_length(length: int, max_size: int) -> None:
    if length > max_size:
        raise FrameError(f"frame of {length} bytes exceeds the {max_size}-byte limit", "oversize")


def frame_header(length: int, max_size: int = MAX_FRAME) -> bytes:
    """The length prefix of a payload of ``length`` bytes sent in pieces after it."""
    check_length(length, max_size)
    return length.to_bytes(LENGTH_BYTES, "big")


def encode_frame(payload: bytes, max_size: int = MAX_FRAME) -> bytes:
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
            check_length(length, max_size)
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
    check_length(length, max_size)
    return _recv_exactly(sock, length)


class FrameDecoder:
    """Incremental frame splitter: feed received bytes, get whole frame payloads back."""

    def __init__(self, max_size: int) -> None:
        self._max = max_size
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Raises :class:`FrameError` as soon as a header announces an oversize frame."""
        self._buf += data
        frames: list[bytes] = []
        while len(self._buf) >= LENGTH_BYTES:
            length = int.from_bytes(self._buf[:LENGTH_BYTES], "big")
            check_length(length, self._max)
            end = LENGTH_BYTES + length
            if len(self._buf) < end:
                break
            frames.append(bytes(self._buf[LENGTH_BYTES:end]))
            del self._buf[:end]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame; non-zero at end of stream means a truncated frame."""
        return len(self._buf)
