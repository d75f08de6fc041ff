"""Typed messages in frames: one msgpack map per frame, strictly decoded.

Every protocol of the client encodes msgspec structs tagged by class name with one shared
encoder, and decodes what a peer sent with a :class:`MessageDecoder` for the union of messages
that peer may send. The decoder turns anything hostile bytes can make msgspec raise into the
protocol's own error type (through :func:`psyche.protocol.untrusted.decode_untrusted`), so each
protocol states its union, its error and a phrase for the log, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from psyche.net.framing import encode_frame
from psyche.protocol.untrusted import decode_untrusted

__all__ = ["MessageDecoder", "encode", "encode_message_frame"]

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()


def encode(msg: msgspec.Struct) -> bytes:
    return _encoder.encode(msg)


def encode_message_frame(msg: msgspec.Struct, max_size: int) -> bytes:
    """``msg`` as one frame; :class:`~psyche.net.errors.FrameError` if the peer would refuse it."""
    return encode_frame(encode(msg), max_size)


class MessageDecoder(Generic[T]):
    """``decoder(payload)``: the message, or ``error("{what}: {reason}")``.

    ``message_type`` is usually a union of tagged structs, which the type system cannot spell as
    ``type[T]``: annotate the variable holding the decoder with its message type instead.
    """

    def __init__(self, message_type: Any, error: Callable[[str], Exception], what: str) -> None:
        self._decode: Callable[[bytes], T] = msgspec.msgpack.Decoder(message_type).decode
        self._error = error
        self._what = what

    def __call__(self, payload: bytes) -> T:
        return decode_untrusted(self._decode, payload, self._error, self._what)
