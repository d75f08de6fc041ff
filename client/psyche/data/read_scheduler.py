"""Fair scheduling of the data server's reads over a few threads.

Reads are the data server's costly part (a shuffle and seeks per sample, megabytes per request),
and one peer asking for a lot must not hold everyone else. The server cuts each request into
chunks and puts every chunk through a :class:`FairReader`: source hosts take turns for the
threads, so a host's backlog delays others by a chunk, not by the backlog.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from psyche.protocol.data_selection import BatchId

__all__ = ["FairReader"]


class FairReader:
    """Runs provider reads on ``workers`` threads, source hosts taking turns for them.

    Each job is one chunk of a request. A host with a job waiting goes to the back of the line
    when one of its jobs starts, and runs at most ``per_host`` jobs at once, so a host asking for
    a lot delays others by at most the chunks already running, however much it has asked for.
    A job whose future was cancelled (its connection is gone) is skipped, never run.
    """

    def __init__(
        self,
        read: Callable[[BatchId], bytes],
        workers: int,
        per_host: int,
        stats: dict[str, int],
    ) -> None:
        self._read = read
        self._stats = stats
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="data-server-read")
        self._free = workers
        self._per_host = per_host
        self._queued: OrderedDict[str, deque[tuple[BatchId, asyncio.Future[bytes]]]] = OrderedDict()
        self._running: dict[str, int] = {}

    def read(self, host: str, batch: BatchId) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(host, deque()).append((batch, future))
        self._dispatch()
        return future

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while self._free:
            host = next((h for h in self._queued if self._running.get(h, 0) < self._per_host), None)
            if host is None:
                return
            jobs = self._queued.pop(host)
            batch, future = jobs.popleft()
            if jobs:
                self._queued[host] = jobs
            if future.done():
                continue
            self._free -= 1
            self._running[host] = self._running.get(host, 0) + 1
            work = loop.run_in_executor(self._executor, self._read, batch)
            work.add_done_callback(functools.partial(self._finished, host, future))

    def _finished(
        self, host: str, future: asyncio.Future[bytes], work: asyncio.Future[bytes]
    ) -> None:
        self._free += 1
        self._stats["chunks_read"] += 1
        if future.done():
            self._stats["chunks_wasted"] += 1  # its connection went while it ran
        left = self._running.pop(host) - 1
        if left:
            self._running[host] = left
        if work.cancelled():
            future.cancel()
        else:
            error = work.exception()  # retrieved even when nobody waits for it any more
            if not future.done():
                if error is None:
                    future.set_result(work.result())
                else:
                    future.set_exception(error)
        self._dispatch()
