"""One process: the indexer following its sources and the web app, on one event loop.

:func:`serve` opens (and migrates) the database, starts uvicorn on ``host:port`` and follows every
source until SIGINT/SIGTERM. The web app reads the database in uvicorn's thread pool, so a slow
page never holds up indexing.
"""

from __future__ import annotations

import asyncio
import logging
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
    web = asyncio.create_task(server.serve())
    while not server.started:
        if web.done():
            await web  # raises the bind error
            return
        await asyncio.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1] if server.servers else s.port
    url = f"http://{s.host}:{port}/"
    log.info("explorer at %s (%d source(s), database %s)", url, len(sources), s.database)
    if s.ready_file is not None:
        s.ready_file.write_text(url + "\n")
    indexing = asyncio.create_task(follow_all(sources, s.interval))
    try:
        await asyncio.wait({web, indexing}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        indexing.cancel()
        server.should_exit = True
        await asyncio.gather(web, indexing, return_exceptions=True)
