"""Following a Solana run for the testnet summary: the coordinator account → ``state`` events.

There is no server on a Solana run to log its states, so the launcher watches the coordinator
account as a client does (``accountSubscribe``, an RPC re-read after every (re)subscription, and
a slow RPC poll as a safety net), decodes it with the project's layout decoder and appends one
``state`` event per new ``nonce`` to a JSON-lines file, in the centralized server's format
(:func:`psyche.events.state_event`). ``t`` is when the launcher saw the state, so round times
include the RPC front's notification latency, as a client sees them.

It runs on its own thread with its own event loop, so the launcher's follow loop stays the
synchronous one both testnets share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path

from solders.keypair import Keypair

from psyche.events import EventLog, state_event
from psyche.solana.errors import ChainError
from psyche.solana.rpc import account_updates
from psyche.solana.session import Endpoints, Session

__all__ = ["ChainFollower"]

log = logging.getLogger(__name__)

POLL_S = 2.0


class ChainFollower:
    def __init__(self, rpc_url: str, ws_url: str, run_id: str, path: Path) -> None:
        self.rpc_url = rpc_url
        self.ws_url = ws_url
        self.run_id = run_id
        self.events = EventLog(path, "chain")
        self.error: str | None = None
        """Set when the follower stopped on its own (the launcher reports it)."""
        self._nonce = -1
        self._last = b""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, name="chain-follower", daemon=True)
        self._ready = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)

    def stop(self) -> None:
        loop, main = self._loop, self._main
        if loop is not None and main is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(main.cancel)
        self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            asyncio.run(self._follow())
        except asyncio.CancelledError:
            pass
        except Exception as e:  # reported by the launcher's follow loop
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self._ready.set()

    async def _follow(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        # Read-only: the session's wallet never signs anything here.
        session = Session(Endpoints(self.rpc_url, self.ws_url), Keypair())
        try:
            accounts = await session.run_accounts(self.run_id)
            self._ready.set()

            async def read() -> None:
                try:
                    data = await session.read(accounts.account)
                except ChainError as e:
                    log.warning("reading the coordinator account failed: %s", e)
                    return
                if data is not None:
                    self._accept(session, data)

            async def poll() -> None:
                while True:
                    await read()
                    await asyncio.sleep(POLL_S)

            tasks: set[asyncio.Task[None]] = set()
            poller = asyncio.create_task(poll())

            def resync() -> None:
                task = asyncio.create_task(read())
                tasks.add(task)
                task.add_done_callback(tasks.discard)

            try:
                async for data in account_updates(self.ws_url, accounts.account, on_connect=resync):
                    self._accept(session, data)
            finally:
                poller.cancel()
        finally:
            await session.close()

    def _accept(self, session: Session, data: bytes) -> None:
        if data == self._last:
            return  # the poll re-reading an account that did not change: nothing to decode
        self._last = data
        try:
            snap = session.layout.decode_account(data)
        except ChainError as e:
            log.warning("ignored an undecodable coordinator account: %s", e)
            return
        if snap.nonce <= self._nonce:
            return
        self._nonce = snap.nonce
        self.events.write(state_event(snap.coordinator, nonce=snap.nonce))
