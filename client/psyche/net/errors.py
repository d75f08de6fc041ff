"""The exceptions of :mod:`psyche.net`.

Each carries a ``kind`` naming the fault for a server's counters (see :mod:`psyche.net.faults`),
so protocol code can wrap them in its own error type without losing why the peer was cut off.
"""

from __future__ import annotations

__all__ = ["BadSignature", "FrameError", "HandshakeTimeout", "NetError"]


class NetError(Exception):
    """A peer broke the transport's rules; ``kind`` names how."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class FrameError(NetError):
    """The peer broke framing or its time limits.

    Kinds: ``oversize`` (length above the limit), ``truncated`` (stream ended inside a frame),
    ``idle_timeout`` (no frame started in time), ``frame_timeout`` (a started frame did not
    complete in time).
    """

    def __init__(self, message: str, kind: str = "truncated") -> None:
        super().__init__(message, kind)


class BadSignature(NetError):
    """The answer to a challenge does not verify under the key it names."""

    def __init__(self, message: str = "bad challenge signature") -> None:
        super().__init__(message, "bad_signature")


class HandshakeTimeout(NetError):
    """The peer did not finish the handshake within the service's limit."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "handshake_timeout")
