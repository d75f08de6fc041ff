"""A centralized server running in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from integration.centralized.helpers import write_state
from psyche.backends.centralized.app import load_coordinator
from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.server import CentralizedServer, ServerOptions


@contextlib.asynccontextmanager
async def serving_centralized(
    tmp_path: Path, init_min_clients: int = 3, **options: Any
) -> AsyncIterator[CentralizedServer]:
    """A server on a free port for the tiny run in ``tmp_path/state.toml`` (waiting for
    ``init_min_clients``), ticking every 50 ms; ``options`` go to `ServerOptions`."""
    coordinator = load_coordinator(
        write_state(tmp_path / "state.toml", init_min_clients=init_min_clients)
    )
    opts = ServerOptions(host="127.0.0.1", port=0, tick_interval=0.05, **options)
    server = CentralizedServer(RunHost(coordinator), opts)
    await server.start()
    ticking = asyncio.create_task(server.serve_forever())
    try:
        yield server
    finally:
        ticking.cancel()
        await server.close()
