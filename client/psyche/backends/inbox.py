"""What a backend hands to its daemon, shared by the centralized and the Solana backend.

A backend's reader task pushes coordinator states and rejection messages here; the daemon pops
them oldest first and wakes on each push. When the backend ends (closed, or stopped by a fatal
error) every waiter wakes and gets that end raised instead of waiting forever. Both deques are
bounded: a daemon that falls behind loses the oldest entries, not memory.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TypeVar

from psyche.backends.base import BackendClosedError, BackendError
from psyche.coordinator import Coordinator

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox:
    def __init__(self, max_states: int = 64, max_rejections: int = 64) -> None:
        self.states: deque[Coordinator] = deque(maxlen=max_states)
        self.rejections: deque[str] = deque(maxlen=max_rejections)
        self.cond = asyncio.Condition()
        """Notified on every push and at the end; backends may wait on it for their own state."""
        self.fatal: BackendError | None = None
        self.closed = False

    @property
    def ended(self) -> bool:
        return self.closed or self.fatal is not None

    def raise_if_ended(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.closed:
            raise BackendClosedError("the backend is closed")

    async def notify(self) -> None:
        async with self.cond:
            self.cond.notify_all()

    async def fail(self, error: BackendError) -> bool:
        """Record the backend's fatal error (the first one wins); True if it was the first."""
        first = self.fatal is None
        if first:
            self.fatal = error
        await self.notify()
        return first

    async def next_state(self) -> Coordinator:
        return await self._pop(self.states)

    async def next_rejection(self) -> str:
        return await self._pop(self.rejections)

    async def _pop(self, queue: deque[T]) -> T:
        async with self.cond:
            await self.cond.wait_for(lambda: bool(queue) or self.ended)
            if queue:
                return queue.popleft()
        self.raise_if_ended()
        raise AssertionError("unreachable: ended without an error")
