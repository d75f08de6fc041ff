"""One process: the indexer following its sources and the web app, on one event loop.

:func:`serve` opens (and migrates) the database, starts uvicorn on ``host:port`` and follows every
source until SIGINT/SIGTERM. The web app reads the database in uvicorn's thread pool, so a slow
page never holds up indexing. With no source it serves the database's history: opened read-only
(:mod:`psyche.explorer.readonly`), no indexer, and the page says it is not followed live.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine

from psyche.explorer.indexer import follow_all
from psyche.explorer.readonly import open_read_only, shown_url
from psyche.explorer.schema import open_engine
from psyche.explorer.sources import Source
from psyche.explorer.store import Store

__all__ = ["ExplorerSettings", "build_sources", "serve"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplorerSettings:
    database: str
    host: str = "127.0.0.1"
    port: int = 8080
    centralized: tuple[str, ...] = ()
    """Status endpoint URLs of centralized servers."""
    rpc: str | None = None
    ws_rpc: str | None = None
    run_ids: tuple[str, ...] = ()
    """Solana runs to follow (with ``rpc``)."""
    pools: tuple[int, ...] = ()
    idl_dir: Path | None = None
    interval: float = 1.0
    cluster: str = ""
    ready_file: Path | None = field(default=None)

    @property
    def follows(self) -> bool:
        """Whether a source is named; with none, the database's history is served read-only."""
        return bool(self.centralized or self.run_ids)


def build_sources(store: Store, s: ExplorerSettings) -> list[Source]:
    sources: list[Source] = []
    if s.centralized:
        from psyche.explorer.centralized import CentralizedSource

        sources += [CentralizedSource(store, url) for url in s.centralized]
    if s.run_ids:
        assert s.rpc is not None
        from psyche.explorer.solana import SolanaSource, SolanaTarget

        for run_id in s.run_ids:
            extra = {"idl_dir": s.idl_dir} if s.idl_dir is not None else {}
            target = SolanaTarget(
                rpc=s.rpc, ws=s.ws_rpc, run_id=run_id, pools=s.pools, cluster=s.cluster, **extra
            )
            sources.append(SolanaSource(store, target))
    return sources


async def serve(s: ExplorerSettings) -> None:
    """Serve until SIGINT/SIGTERM: following ``s``'s sources, or, given none, the database's
    history read-only (:class:`~psyche.explorer.readonly.NotServable` if it cannot be)."""
    import uvicorn

    from psyche.explorer.web import make_app

    store = Store(_open(s))
    sources = build_sources(store, s)
    app = make_app(store, live=s.follows)
    config = uvicorn.Config(app, host=s.host, port=s.port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    # Bound here, so a taken port is an OSError before anything starts and port 0 has a number.
    sock = socket.create_server((s.host, s.port))
    port = sock.getsockname()[1]
    web = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if web.done():
            await web
            return
        await asyncio.sleep(0.05)
    url = f"http://{s.host}:{port}/"
    if s.follows:
        log.info("explorer at %s (%d source(s), database %s)", url, len(sources), s.database)
    else:
        log.info("explorer at %s: the history in %s, read-only (not followed live)", url,
                 shown_url(s.database))  # fmt: skip
    if s.ready_file is not None:
        s.ready_file.write_text(url + "\n")
    indexing = asyncio.create_task(follow_all(sources, s.interval)) if s.follows else None
    running = [web] if indexing is None else [web, indexing]
    try:
        await _until_stopped(running)
    finally:
        if indexing is not None:
            indexing.cancel()
        server.should_exit = True
        await asyncio.gather(*running, return_exceptions=True)
        # Closing the connections checkpoints SQLite's WAL into the database file, so a stopped
        # explorer leaves one self-contained file (the process ends without the interpreter's
        # teardown, which used to close them: psyche.cli.process_exit).
        store.engine.dispose()


def _open(s: ExplorerSettings) -> Engine:
    """The database: migrated for following, or opened read-only to serve its history."""
    return open_engine(s.database) if s.follows else open_read_only(s.database)


async def _until_stopped(tasks: list[asyncio.Task[None]]) -> None:
    """Until SIGINT/SIGTERM or the first of ``tasks`` ends.

    Our own handlers, not uvicorn's: uvicorn re-raises the signal once it has stopped, which would
    end the process before the indexer has closed its sources (and logged what they cost)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({*tasks, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        await asyncio.gather(stopping, return_exceptions=True)
