"""The centralized server ticks just after the wall clock's multiples of its interval: the
coordinator's clock is whole seconds, so a timeout (a RoundWitness's end) expires at a second
boundary, and an aligned tick ends the phase then instead of up to one interval later."""

from __future__ import annotations

import asyncio
import time

import pytest

from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.server import (
    TICK_SLACK_S,
    CentralizedServer,
    ServerOptions,
    next_tick_at,
)

from .support import make_coordinator


@pytest.mark.parametrize(
    ("now", "interval", "due"),
    [
        (100.0, 0.5, 100.5),  # on a boundary: the next one, never now again
        (100.2, 0.5, 100.5),
        (100.7, 0.5, 101.0),  # the second boundary where whole-second timeouts expire
        (100.999, 1.0, 101.0),
        (7.01, 0.05, 7.05),
    ],
)
def test_the_next_tick_is_just_after_the_next_multiple_of_the_interval(
    now: float, interval: float, due: float
) -> None:
    assert next_tick_at(now, interval) == pytest.approx(due + TICK_SLACK_S)


def test_the_server_ticks_once_per_interval_on_the_aligned_times() -> None:
    interval = 0.2
    seen: list[float] = []

    async def go() -> None:
        hub = RunHost(make_coordinator(), first_seq=1)
        real_tick = hub.tick

        def tick(now: int, seed: int) -> bool:
            seen.append(time.time())
            return real_tick(now, seed)

        hub.tick = tick  # type: ignore[method-assign]
        options = ServerOptions(host="127.0.0.1", port=0, tick_interval=interval)
        task = asyncio.create_task(CentralizedServer(hub, options).serve_forever())
        await asyncio.sleep(1.5)
        task.cancel()

    asyncio.run(go())
    assert 3 <= len(seen) <= 8, seen
    # One tick per interval at most (a late one is never followed by a burst)...
    slots = [int(t // interval) for t in seen]
    assert len(set(slots)) == len(slots), slots
    # ...and, where the loop was not held up, right after the interval's start.
    offsets = sorted(t % interval for t in seen)
    assert offsets[len(offsets) // 2] < TICK_SLACK_S + interval / 2, offsets
