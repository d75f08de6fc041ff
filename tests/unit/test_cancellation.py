"""A cancellation is never lost: the client's code waits with ``asyncio.timeout``, never with
``asyncio.wait_for``.

On Python 3.11 (the oldest this project supports) ``asyncio.wait_for`` returns the inner result
instead of raising when its task is cancelled in the same loop iteration as the inner awaitable
completes (CPython gh-86296, fixed in 3.12, where ``wait_for`` is built on ``asyncio.timeout``).
A task that loops over such waits — a P2P host request, a socket read — then goes on as if
nothing had happened, and a TaskGroup waiting for it never ends: CI saw a Solana client sit idle
for 60 s after SIGTERM with its engine running (sessions 22-23; the SIGTERM nudge of
``psyche.cli.sigterm`` bounded it). ``asyncio.timeout`` counts cancellations, so it cannot lose
one.
"""

from __future__ import annotations

import ast
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "client" / "psyche"


def _wait_for_calls() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return found


def test_the_client_never_waits_with_asyncio_wait_for() -> None:
    assert _wait_for_calls() == [], "use `async with asyncio.timeout(t): await …` (see docstring)"


async def _with_wait_for(fut: asyncio.Future[int]) -> int:
    return await asyncio.wait_for(fut, 10)


async def _with_timeout(fut: asyncio.Future[int]) -> int:
    async with asyncio.timeout(10):
        return await fut


def _cancelled_as_it_completes(wait: Callable[[asyncio.Future[int]], Awaitable[int]]) -> bool:
    """Whether a task cancelled in the loop iteration its awaited future completes in ends
    cancelled (the cancel reached it) rather than with the result (the cancel was lost)."""

    async def main() -> bool:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def waiter() -> int:
            return await wait(fut)

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the task now waits
        fut.set_result(1)
        task.cancel()  # same iteration: a SIGTERM handler's cancel landing as a reply arrives
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    return asyncio.run(main())


def test_asyncio_timeout_delivers_a_cancel_that_lands_as_the_wait_completes() -> None:
    assert _cancelled_as_it_completes(_with_timeout)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for is sound from Python 3.12")
def test_asyncio_wait_for_loses_it_on_python_3_11() -> None:
    """Why the rule above exists: the same race through ``wait_for`` returns the result."""
    assert not _cancelled_as_it_completes(_with_wait_for)


def test_stopping_an_eval_pass_does_not_swallow_the_callers_cancel() -> None:
    """The engine stops a running eval pass before it changes the weights; a SIGTERM that lands
    while it waits for the pass must still stop the engine (a suppress(CancelledError) around
    the wait swallowed it)."""
    import threading

    from psyche.daemon.evaluating import Evaluating

    async def main() -> bool:
        evals = Evaluating.__new__(Evaluating)
        evals._cancel = threading.Event()
        evals._task = asyncio.create_task(asyncio.sleep(0.2))  # a pass ending soon after

        async def engine() -> str:
            await evals.stop()
            return "went on"

        task = asyncio.create_task(engine())
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(main())
