"""Assembly and lifecycle: the chain, the HTTP JSON-RPC front, the websocket front and the slot
ticker, on one event loop (so every LiteSVM call happens on one thread).

* :class:`LocalSvm` — ``async with LocalSvm(programs=...) as node:`` on the running loop.
* :class:`LocalSvmThread` — the same on a thread of its own with its own loop, for synchronous
  code and for tests whose other half (a CLI in a subprocess, ``asyncio.run`` in the test) must
  reach it over sockets while the test thread blocks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from solders.account import Account
from solders.pubkey import Pubkey
from solders.signature import Signature
from websockets.asyncio.server import Server, serve

from psyche.localsvm.chain import FAUCET_LAMPORTS, Chain
from psyche.localsvm.clock import SECONDS_PER_SLOT
from psyche.localsvm.errors import describe
from psyche.localsvm.execution import Execution
from psyche.localsvm.history import TxRecord
from psyche.localsvm.http_server import MAX_REQUEST_BODY_SIZE, HttpServer
from psyche.localsvm.jsonrpc import RpcMethods
from psyche.localsvm.programs import load_programs
from psyche.localsvm.protocol import dispatch
from psyche.localsvm.pubsub import PubSub

__all__ = ["AirdropError", "LocalSvm", "LocalSvmThread"]

log = logging.getLogger(__name__)

T = TypeVar("T")
ProgramSources = Mapping[Pubkey, Path | str | bytes] | Mapping[str, Path | str | bytes]
MAX_WS_MESSAGE = 1 << 20
PORT_PAIR_ATTEMPTS = 50


class AirdropError(RuntimeError):
    """The faucet's transfer did not succeed."""


def _signature(value: Signature | str) -> Signature:
    return value if isinstance(value, Signature) else Signature.from_string(value)


class LocalSvm:
    """The programs on LiteSVM behind a validator's RPC and websocket fronts (package docstring).

    ``rpc_port`` 0 picks a free port; ``ws_port`` None is the RPC port + 1, as a validator (and
    the Solana tools deriving a websocket URL) expect — with ``rpc_port`` 0 a free pair is
    found. ``airdrops`` are funded from the faucet at start."""

    def __init__(
        self,
        programs: ProgramSources | None = None,
        *,
        host: str = "127.0.0.1",
        rpc_port: int = 0,
        ws_port: int | None = None,
        airdrops: Mapping[Pubkey, int] | None = None,
        now: Callable[[], float] = time.time,
        max_body: int = MAX_REQUEST_BODY_SIZE,
        faucet_lamports: int = FAUCET_LAMPORTS,
    ) -> None:
        self._programs = load_programs(programs or {})
        self._host = host
        self._rpc_port = rpc_port
        self._ws_port = ws_port
        self._airdrops = dict(airdrops or {})
        self._now = now
        self._max_body = max_body
        self._faucet_lamports = faucet_lamports
        self._chain: Chain | None = None
        self._http: HttpServer | None = None
        self._ws: Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.rpc_port = 0
        self.ws_port = 0

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        chain = Chain(self._programs, now=self._now, faucet_lamports=self._faucet_lamports)
        self._chain = chain
        methods = RpcMethods(chain).table()
        pubsub = PubSub(chain)
        self._http = HttpServer(lambda body: dispatch(body, methods), max_body=self._max_body)
        await self._bind(pubsub)
        try:
            for pubkey, lamports in self._airdrops.items():
                self.airdrop(pubkey, lamports)
        except BaseException:
            await self.stop()
            raise
        self._ticker = asyncio.create_task(self._tick(), name="localsvm-slots")
        log.info("local SVM: RPC %s, websocket %s", self.url, self.ws_url)

    async def _bind(self, pubsub: PubSub) -> None:
        assert self._http is not None
        pair = self._rpc_port == 0 and self._ws_port is None
        for _ in range(PORT_PAIR_ATTEMPTS if pair else 1):
            self.rpc_port = await self._http.start(self._host, self._rpc_port)
            ws_port = self._ws_port if self._ws_port is not None else self.rpc_port + 1
            try:
                self._ws = await serve(
                    pubsub.handler,
                    self._host,
                    ws_port,
                    max_size=MAX_WS_MESSAGE,
                    # A validator's websocket offers no compression; deflating a 220 KB account
                    # notification per subscriber would only cost CPU.
                    compression=None,
                )
            except OSError:
                await self._http.close()
                if not pair:
                    raise
                continue
            self.ws_port = int(next(iter(self._ws.sockets)).getsockname()[1])
            return
        raise OSError(f"no free pair of consecutive ports on {self._host}")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        if self._ws is not None:
            self._ws.close()
            await self._ws.wait_closed()
            self._ws = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def __aenter__(self) -> LocalSvm:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _tick(self) -> None:
        """Advance the slot on time even when nobody asks, for ``slotSubscribe``."""
        chain = self.chain
        while True:
            chain.sync()
            elapsed = chain.clock.now() - chain.clock.genesis_time
            wait = SECONDS_PER_SLOT - elapsed % SECONDS_PER_SLOT
            await asyncio.sleep(min(SECONDS_PER_SLOT, max(0.01, wait)))

    # --- access (call on the loop's thread) -----------------------------------------------------

    @property
    def chain(self) -> Chain:
        if self._chain is None:
            raise RuntimeError("the local SVM is not started")
        return self._chain

    @property
    def svm(self) -> Any:
        """The :class:`solders.litesvm.LiteSVM` itself (same thread only)."""
        return self.chain.svm

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.rpc_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self._host}:{self.ws_port}"

    @property
    def slot(self) -> int:
        return self.chain.sync()

    def airdrop(self, pubkey: Pubkey, lamports: int) -> Signature:
        """Fund ``pubkey`` from the faucet (a committed transfer); returns its signature."""
        ex: Execution = self.chain.airdrop(pubkey, lamports)
        if ex.err is not None:
            raise AirdropError(f"airdrop of {lamports} to {pubkey}: {describe(ex.err)}")
        return ex.signature

    def get_account(self, pubkey: Pubkey) -> Account | None:
        self.chain.sync()
        return self.chain.get_account(pubkey)

    def transaction(self, signature: Signature | str) -> TxRecord | None:
        """A committed transaction: logs, compute units, fee, error."""
        return self.chain.transaction(_signature(signature))

    @property
    def history(self) -> list[TxRecord]:
        """Every committed transaction still kept, oldest first."""
        return list(self.chain.history)

    def advance_slots(self, n: int) -> int:
        """Test hook: ``n`` slots (and ``0.4·n`` s of chain clock) ahead; returns the slot."""
        return self.chain.advance_slots(n)

    def advance_time(self, seconds: float) -> int:
        """Test hook: the chain clock (and slots with it) ``seconds`` ahead; returns the slot."""
        return self.chain.advance_time(seconds)


class LocalSvmThread:
    """A :class:`LocalSvm` on a daemon thread with its own event loop; every method may be
    called from any thread (it runs on the server's thread and waits for the result).

    ``with LocalSvmThread(programs=...) as node:`` — ``node.url``, ``node.ws_url``,
    ``node.airdrop(pubkey, lamports)``, ``node.get_account(pubkey)``, ``node.transaction(sig)``,
    ``node.history``, ``node.advance_slots(n)``; ``node.call(fn)`` runs ``fn(local_svm)`` on the
    server's thread for anything else (e.g. reading ``local_svm.svm``)."""

    def __init__(self, programs: ProgramSources | None = None, **kwargs: Any) -> None:
        self._programs = programs
        self._kwargs = kwargs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._node: LocalSvm | None = None
        self.url = ""
        self.ws_url = ""

    def start(self, timeout: float = 30.0) -> LocalSvmThread:
        # Loaded here so that a missing program fails in the caller's thread, with its message.
        programs = load_programs(self._programs or {})
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="localsvm", daemon=True)
        self._thread.start()

        async def start() -> None:
            self._node = LocalSvm(programs, **self._kwargs)
            await self._node.start()

        try:
            asyncio.run_coroutine_threadsafe(start(), loop).result(timeout)
        except BaseException:
            self._shutdown_loop()
            raise
        assert self._node is not None
        self.url, self.ws_url = self._node.url, self._node.ws_url
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is None:
            return
        if self._node is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                asyncio.run_coroutine_threadsafe(self._node.stop(), self._loop).result(timeout)
        self._shutdown_loop()

    def _shutdown_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> LocalSvmThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def call(self, fn: Callable[[LocalSvm], T], timeout: float = 30.0) -> T:
        """``fn(local_svm)`` on the server's thread; its result (or exception)."""
        node, loop = self._node, self._loop
        if node is None or loop is None:
            raise RuntimeError("the local SVM is not started")
        if threading.current_thread() is self._thread:
            return fn(node)

        async def run() -> T:
            return fn(node)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)

    def airdrop(self, pubkey: Pubkey, lamports: int) -> Signature:
        return self.call(lambda n: n.airdrop(pubkey, lamports))

    def get_account(self, pubkey: Pubkey) -> Account | None:
        return self.call(lambda n: n.get_account(pubkey))

    def transaction(self, signature: Signature | str) -> TxRecord | None:
        return self.call(lambda n: n.transaction(signature))

    @property
    def history(self) -> list[TxRecord]:
        return self.call(lambda n: n.history)

    @property
    def slot(self) -> int:
        return self.call(lambda n: n.slot)

    def advance_slots(self, n: int) -> int:
        return self.call(lambda node: node.advance_slots(n))

    def advance_time(self, seconds: float) -> int:
        return self.call(lambda node: node.advance_time(seconds))
