"""What a source is: something the indexer asks, once per poll, to bring the store up to date.

A source raises :class:`SourceUnavailable` when it cannot reach its server or RPC (the indexer
backs off and asks again) and :class:`BadInput` when what it got cannot be decoded (the indexer
logs one line, skips that item, and goes on).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["BadInput", "Source", "SourceUnavailable"]


class SourceUnavailable(Exception):
    """The server or RPC did not answer (or answered with an error)."""


class BadInput(Exception):
    """An answer, account or transaction that is not what it should be."""


class Source(Protocol):
    name: str
    """How log lines name this source (``centralized http://…``, ``solana <run id>``)."""

    async def poll(self) -> int:
        """Store whatever is new; returns how many rows were stored."""
        ...

    async def wait_for_change(self, timeout: float) -> None:
        """Return when the source has something new (a websocket notification), or after
        ``timeout``."""
        ...

    async def close(self) -> None: ...
