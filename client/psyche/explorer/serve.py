"""One process: the indexer following its sources and the web app, on one event loop.

:func:`serve` opens (and migrates) the database, starts uvicorn on ``host:port`` and follows every
source until SIGINT/SIGTERM. The web app reads the database in uvicorn's thread pool, so a slow
page never holds up indexing.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

from psyche.explorer.indexer import follow_all
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
    import uvicorn

    from psyche.explorer.schema import open_engine
    from psyche.explorer.web import make_app

    store = Store(open_engine(s.database))
    sources = build_sources(store, s)
    config = uvicorn.Config(
        make_app(store), host=s.host, port=s.port, log_level="warning", lifespan="off"
    )
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
    log.info("explorer at %s (%d source(s), database %s)", url, len(sources), s.database)
    if s.ready_file is not None:
        s.ready_file.write_text(url + "\n")
    indexing = asyncio.create_task(follow_all(sources, s.interval))
    # Ours, not uvicorn's: uvicorn re-raises the signal once it has stopped, which would end the
    # process before the indexer has closed its sources (and logged what they cost).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({web, indexing, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        indexing.cancel()
        stopping.cancel()
        server.should_exit = True
        await asyncio.gather(web, indexing, stopping, return_exceptions=True)
