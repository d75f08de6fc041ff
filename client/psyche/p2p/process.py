"""The parent's end of the process boundary: spawn the libp2p host and talk to it (asyncio).

:class:`HostProcess` owns the child (``python -m psyche.p2p.host``) and the control socket pair
to it (:mod:`psyche.p2p.control`). It matches replies (``Ack``, ``FetchDone``, ``Reserved``) to
requests by ``req_id`` and hands every unsolicited message (gossip deliveries, peer reports) to a
callback.
It imports neither trio nor libp2p: the daemon's event loop only ever sees asyncio streams.

The secret key reaches the child in the first frame over the socket pair, never on its command
line. If the child dies, every pending request fails with :class:`NodeStopped` and ``on_close``
runs once, so callers blocked on the node wake up instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from psyche.p2p.control import (
    Ack,
    Failed,
    FetchDone,
    FrameDecoder,
    HostMessage,
    Init,
    ParentMessage,
    Ready,
    Reserved,
    Shutdown,
    decode_host,
    encode_frame,
)
from psyche.p2p.errors import NodeStopped, P2PError

__all__ = ["REQUEST_TIMEOUT", "HostProcess"]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0


class HostProcess:
    """One host child process and its control channel."""

    def __init__(
        self, on_message: Callable[[HostMessage], None], on_close: Callable[[], None]
    ) -> None:
        self._on_message = on_message
        self._on_close = on_close
        self._proc: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Ready] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._closed = False

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise NodeStopped("the p2p host was never started")
        return self._proc.pid

    async def spawn(self, init: Init, startup_timeout: float) -> Ready:
        """Start the child, send ``init`` and wait for its ``Ready`` (or its ``Failed``)."""
        if self._proc is not None:
            raise P2PError("this host process was already started")
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "psyche.p2p.host",
                "--control-fd",
                str(child_sock.fileno()),
                "--parent-pid",
                str(os.getpid()),
                pass_fds=(child_sock.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
            )
        finally:
            child_sock.close()
        reader, self._writer = await asyncio.open_unix_connection(sock=parent_sock)
        self._ready = asyncio.get_running_loop().create_future()
        self._reader_task = asyncio.create_task(self._read_loop(reader), name="p2p-control")
        self.send(init)
        try:
            # Not shielded: a cancelled or timed-out start cancels ``_ready`` itself. Behind a
            # shield, cancelling dropped the only reader of ``_ready`` while the host, stopped
            # by the same SIGTERM, then set its NodeStopped there: "Future exception was never
            # retrieved" after a clean stop (issue 28).
            async with asyncio.timeout(startup_timeout):
                return await self._ready
        except BaseException:
            await self.stop()
            raise

    @property
    def closed(self) -> bool:
        """True once the child is stopped or gone; requests then raise :class:`NodeStopped`."""
        return self._closed

    def next_id(self) -> int:
        return next(self._ids)

    def send(self, msg: ParentMessage) -> None:
        if self._closed or self._writer is None or self._writer.is_closing():
            raise NodeStopped("the p2p node is not running")
        self._writer.write(encode_frame(msg))

    async def request(
        self,
        make: Callable[[int], ParentMessage],
        req_id: int | None = None,
        *,
        timeout: float = REQUEST_TIMEOUT,
    ) -> Any:
        """Send ``make(req_id)`` and wait for the reply (``Ack``, ``FetchDone``, ``Reserved``)
        with that id."""
        req_id = self.next_id() if req_id is None else req_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = future
        try:
            self.send(make(req_id))
            async with asyncio.timeout(timeout):
                return await future
        finally:
            self._pending.pop(req_id, None)

    async def stop(self) -> None:
        """Ask the child to exit; SIGTERM, then SIGKILL, if it does not within a few seconds."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(P2PError):
                self.send(Shutdown())
            self._closed = True
            try:
                async with asyncio.timeout(STOP_TIMEOUT):
                    await proc.wait()
            except TimeoutError:
                log.warning("the p2p host did not stop when asked; terminating it")
                proc.terminate()  # SIGTERM exits even a wedged host, outside its event loop
                try:
                    async with asyncio.timeout(STOP_TIMEOUT):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
        self._fail_pending(NodeStopped("the p2p node was stopped"))

    def _fail_pending(self, error: Exception) -> None:
        # Every future here has a waiter that cancels it when it stops waiting, so none should
        # be left unread; marking the error seen keeps a waiter cancelled in this very loop
        # turn from being logged as "Future exception was never retrieved" all the same.
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()
        self._pending.clear()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()
        self._on_close()

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder()
        error: Exception = NodeStopped("the p2p host process exited")
        try:
            while data := await reader.read(1 << 16):
                for frame in decoder.feed(data):
                    self._dispatch(decode_host(frame))
        except P2PError as e:
            error = e
            log.error("p2p control channel broken: %s", e)
        except ConnectionError:
            pass
        if not self._closed:
            log.error("the p2p host process exited unexpectedly")
        self._closed = True
        self._fail_pending(error)

    def _dispatch(self, msg: HostMessage) -> None:
        if isinstance(msg, Ack | FetchDone | Reserved):
            future = self._pending.get(msg.req_id)
            if future is not None and not future.done():
                future.set_result(msg)
        elif isinstance(msg, Ready):
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(msg)
        elif isinstance(msg, Failed):
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(P2PError(f"the p2p host failed: {msg.error}"))
            else:
                log.error("the p2p host failed: %s", msg.error)
        else:
            self._on_message(msg)
