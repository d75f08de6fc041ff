"""Poll a condition until it holds, or give up after a timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def eventually(pred: Callable[[], object], timeout: float, interval: float = 0.02) -> bool:
    """Whether ``pred()`` became true within ``timeout`` seconds (checked every ``interval``)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True


async def until(
    pred: Callable[[], object],
    what: str = "the condition",
    timeout: float = 5.0,
    interval: float = 0.02,
) -> None:
    """Wait (in the event loop) until ``pred()`` is true; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(interval)


def until_sync(
    pred: Callable[[], object],
    what: str = "the condition",
    timeout: float = 10.0,
    interval: float = 0.01,
) -> None:
    """`until` for tests without an event loop: blocks the thread between checks."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)
