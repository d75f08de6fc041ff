"""Length-prefixed frames for the TCP data server (SPEC §6.5).

Each frame is a 4-byte big-endian payload length followed by the payload, as with tokio's
``LengthDelimitedCodec`` in the reference. The length is checked against a hard maximum *before*
any payload byte is read or buffered, so a peer cannot make us allocate by announcing a huge
frame. The limits are asymmetric because the traffic is: requests and handshake messages are a
few hundred bytes (the server accepts at most :data:`MAX_REQUEST_FRAME`), token responses are
large (the client accepts at most :data:`MAX_RESPONSE_FRAME`, the reference's 64 MiB).

Both an asyncio reader (server) and a blocking-socket reader (client) are provided; they share
the wire format and the limit check. :func:`decode_untrusted` is the one place where decoding a
payload (or text inside one) is made to fail only with the caller's protocol error type.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import TypeVar

import msgspec

from psyche.data.provider import DataError

__all__ = [
    "MAX_REQUEST_FRAME",
    "MAX_RESPONSE_FRAME",
    "FrameError",
    "decode_untrusted",
    "encode_frame",
    "read_frame",
    "recv_frame",
]

LENGTH_BYTES = 4
MAX_REQUEST_FRAME = 64 * 1024
MAX_RESPONSE_FRAME = 64 * 1024 * 1024


class FrameError(DataError):
    """The peer broke framing: an oversize length, or the stream ended inside a frame."""


_In = TypeVar("_In")
_Out = TypeVar("_Out")

# A schema error is not all that hostile bytes can raise. msgspec and json recurse once per
# nesting level, so a few kilobytes of nested arrays raise RecursionError before any schema check;
# msgspec raises UnicodeDecodeError (not a MsgspecError) for invalid UTF-8 in a msgpack string;
# json accepts lone surrogates ("\ud800") that blow up as UnicodeEncodeError wherever the text is
# encoded later; validators raise ValueError. UnicodeError and JSONDecodeError are ValueErrors.
_DECODE_ERRORS = (msgspec.MsgspecError, RecursionError, ValueError)


def decode_untrusted(
    decode: Callable[[_In], _Out], data: _In, error: Callable[[str], Exception], what: str
) -> _Out:
    """``decode(data)``, with anything hostile input can make it raise turned into ``error``.

    The message is ``"{what}: {reason}"``, made safe to log and to put on the wire (a reason may
    quote the peer's lone surrogates, which a UTF-8 log stream or encoder would choke on).
    """
    try:
        return decode(data)
    except _DECODE_ERRORS as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        safe = reason.encode("utf-8", "backslashreplace").decode("utf-8")
        raise error(f"{what}: {safe}") from None


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
