"""A SIGTERM whose cancellation something swallows still stops the client: after
``STOP_NUDGE_S`` the pending tasks are logged with where they wait and cancelled again
(``cancel_on_sigterm``); a shutdown that has begun is never hurried."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

import pytest

from psyche.cli import client_process
from psyche.cli.client_process import cancel_on_sigterm, remove_sigterm_handler


async def _swallows_one_cancel() -> None:
    # The kind of child that hangs a TaskGroup's exit: it takes its first cancellation for an
    # inner timeout and goes on waiting.
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    await asyncio.Event().wait()


def test_a_swallowed_sigterm_is_nudged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(client_process, "STOP_NUDGE_S", 0.3)

    async def main() -> str:
        terminated = cancel_on_sigterm()
        child = asyncio.create_task(_swallows_one_cancel(), name="stubborn")
        # Without the nudge this test would hang: a guard ends the child later, unlogged.
        asyncio.get_running_loop().call_later(10, child.cancel)
        try:
            asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
            # SIGTERM's cancel passes to the child, which swallows it: this await would last
            # forever, as the TaskGroup of a hung client's engine did; the nudge ends the child.
            await child
            return "not cancelled"
        except asyncio.CancelledError:
            assert terminated.is_set()
            return "cancelled"
        finally:
            remove_sigterm_handler()

    with caplog.at_level(logging.WARNING, logger="psyche.client"):
        assert asyncio.run(main()) == "cancelled"
    (line,) = [r.getMessage() for r in caplog.records if "still not stopping" in r.getMessage()]
    assert "stubborn at " in line and "test_sigterm_nudge.py" in line, line


def test_a_shutdown_that_has_begun_is_not_nudged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(client_process, "STOP_NUDGE_S", 0.2)

    async def main() -> None:
        cancel_on_sigterm()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            remove_sigterm_handler()  # the shutdown begins: what follows may take its time
            await asyncio.sleep(0.5)

    with caplog.at_level(logging.WARNING, logger="psyche.client"):
        asyncio.run(main())
    assert not [r for r in caplog.records if "still not stopping" in r.getMessage()]
