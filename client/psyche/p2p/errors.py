"""The P2P layer's exception family.

One base class, :class:`P2PError`, so the daemon can tell network trouble from training trouble
with a single ``except``. The subclasses name what went wrong in terms the caller can act on:
a fetch that found no honest peer in time (:class:`FetchError` and its kinds), an announcement
that must be dropped (:class:`AnnouncementError`), or a host process that is gone
(:class:`NodeStopped`). They live in their own module because both sides of the process
boundary (the asyncio parent and the trio child) and the message schema raise them.
"""

from __future__ import annotations

__all__ = [
    "AnnouncementError",
    "BlobNotFound",
    "BlobTooLarge",
    "ControlError",
    "FetchError",
    "FetchTimeout",
    "NodeStopped",
    "P2PError",
]


class P2PError(Exception):
    """Base class of every error raised by :mod:`psyche.p2p`."""


class NodeStopped(P2PError):
    """The libp2p host process is not running (never started, stopped, or it died)."""


class ControlError(P2PError):
    """A control frame between the node and its host process was oversize or malformed."""


class AnnouncementError(P2PError):
    """A gossip announcement is oversize, malformed, badly signed, or from the wrong sender."""


class FetchError(P2PError):
    """No peer delivered a blob whose SHA-256 matched the requested hash.

    ``failures`` lists ``(peer_id, reason)`` for every failed attempt, oldest first, so the
    caller can log which peers misbehaved.
    """

    def __init__(self, message: str, failures: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.failures: list[tuple[str, str]] = list(failures or [])


class BlobTooLarge(FetchError):
    """Every asked peer reported the blob larger than the caller's ``max_size``."""


class BlobNotFound(FetchError):
    """No asked peer had the blob (or none of them was allowed) before the deadline."""


class FetchTimeout(FetchError):
    """The overall fetch deadline passed while peers were still failing or slow."""
