"""Following sources: poll, store, wait for a change or the interval, and back off on outages.

An outage (:class:`~psyche.explorer.sources.SourceUnavailable`) is logged once when it starts and
once when it ends; polls in between wait 1, 2, 4 … up to 30 s. Undecodable input
(:class:`~psyche.explorer.sources.BadInput`) is logged once per distinct message and the next
poll goes on. Whatever a source stored is committed; restarting resumes from the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from psyche.explorer.sources import BadInput, Source, SourceUnavailable

__all__ = ["follow", "follow_all"]

log = logging.getLogger(__name__)

MAX_BACKOFF = 30.0


async def follow(
    source: Source, interval: float = 1.0, *, stop: asyncio.Event | None = None
) -> None:
    """Keep ``source`` stored until cancelled (or ``stop`` is set)."""
    failures = 0
    said: set[str] = set()
    while stop is None or not stop.is_set():
        wait = interval
        try:
            await source.poll()
            if failures:
                log.info("%s: reachable again after %d failed poll(s)", source.name, failures)
            failures = 0
        except SourceUnavailable as e:
            failures += 1
            wait = min(MAX_BACKOFF, interval * 2 ** min(failures - 1, 6))
            if failures == 1:
                log.warning("%s: unavailable (%s); retrying with back-off", source.name, e)
        except BadInput as e:
            text = str(e)
            if text not in said and len(said) < 1000:
                said.add(text)
                log.warning("%s: skipped bad input: %s", source.name, text)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug must not stop the other runs' indexing
            log.exception("%s: poll failed: %s", source.name, e)
            wait = MAX_BACKOFF
        await source.wait_for_change(wait)


async def follow_all(sources: Sequence[Source], interval: float = 1.0) -> None:
    started = time.monotonic()
    try:
        await asyncio.gather(*(follow(s, interval) for s in sources))
    finally:
        minutes = max(1e-9, (time.monotonic() - started) / 60)
        for s in sources:
            await s.close()
            calls = getattr(s, "calls", None)
            if calls is not None:
                # What following this run cost its RPC or server (docs/explorer.md, "Cost").
                log.info("%s: %d calls in %.1f min (%.1f per minute)", s.name, calls, minutes,
                         calls / minutes)  # fmt: skip
