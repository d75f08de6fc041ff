"""``psyche explorer``: the run explorer (indexer + web page + JSON API), docs/explorer.md.

Arguments are parsed before anything heavy (SQLAlchemy, Starlette, uvicorn, solders) is imported.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from psyche.cli.paths import AbsolutePath, absolute

if TYPE_CHECKING:
    from psyche.explorer.serve import ExplorerSettings


@click.group("explorer")
def explorer() -> None:
    """Run explorer: follow runs into a database and show them on a web page."""


@explorer.command("serve")
@click.option(
    "--database",
    default="explorer.sqlite",
    show_default=True,
    envvar="EXPLORER_DATABASE",
    help="SQLite file (or sqlite:///path), or a postgresql://user:pass@host/db URL. With no"
    " source to follow, the stored runs to serve (read-only; the file must exist).",
)
@click.option("--host", default="127.0.0.1", show_default=True, envvar="EXPLORER_HOST")
@click.option(
    "--port",
    default=8080,
    show_default=True,
    envvar="EXPLORER_PORT",
    type=click.IntRange(0, 65535),
    help="HTTP port of the page and /api/ (0: a free one, logged).",
)
@click.option(
    "--centralized",
    multiple=True,
    envvar="EXPLORER_CENTRALIZED",
    help="A centralized server's status URL (http://host:port, its --status-port); repeatable.",
)
@click.option("--rpc", default=None, envvar="RPC", help="Solana JSON-RPC URL.")
@click.option(
    "--ws-rpc",
    default=None,
    envvar="WS_RPC",
    help="Solana websocket URL (default: derived from --rpc; 'none' polls only).",
)
@click.option(
    "--run-id", "run_ids", multiple=True, envvar="EXPLORER_RUN_IDS",
    help="A Solana run to follow (needs --rpc); repeatable.",
)  # fmt: skip
@click.option(
    "--pool", "pools", multiple=True, type=click.IntRange(0, 2**64 - 1),
    envvar="EXPLORER_POOLS", help="A Mining Pool index to follow; repeatable.",
)  # fmt: skip
@click.option("--cluster", default="", envvar="EXPLORER_CLUSTER", help="Cluster name shown.")
@click.option(
    "--interval", default=1.0, show_default=True, envvar="EXPLORER_INTERVAL",
    type=click.FloatRange(0.1, 3600), help="Seconds between polls.",
)  # fmt: skip
@click.option(
    "--ready-file", default=None, type=AbsolutePath(dir_okay=False),
    envvar="EXPLORER_READY_FILE", help="Write the page's URL here once it listens.",
)  # fmt: skip
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def serve_cmd(
    database: str,
    host: str,
    port: int,
    centralized: tuple[str, ...],
    rpc: str | None,
    ws_rpc: str | None,
    run_ids: tuple[str, ...],
    pools: tuple[int, ...],
    cluster: str,
    interval: float,
    ready_file: Path | None,
    verbose: bool,
) -> None:
    """Serve the explorer on HOST:PORT, following runs; with no source, the history in --database.

    The runs --centralized and --run-id name are followed into --database (created if missing).
    With neither, the database must exist: it is opened read-only, nothing is followed, and the
    page is marked "history: not followed live"."""
    if run_ids and not rpc:
        raise click.UsageError("--run-id needs --rpc")
    if not centralized and not run_ids and (rpc or ws_rpc or pools):
        raise click.UsageError(
            "--rpc, --ws-rpc and --pool follow a Solana run: give --run-id too (with no source,"
            " the runs stored in --database are served read-only)"
        )
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll is noise
    given = database
    if "://" not in database:
        database = str(absolute(database))  # a bare path: a SQLite file, named absolutely
    from psyche.explorer.serve import ExplorerSettings

    if rpc and ws_rpc is None:
        from psyche.solana.session import websocket_url

        ws_rpc = websocket_url(rpc)
    settings = ExplorerSettings(
        database=database,
        host=host,
        port=port,
        centralized=centralized,
        rpc=rpc,
        ws_rpc=None if ws_rpc == "none" else ws_rpc,
        run_ids=run_ids,
        pools=pools,
        cluster=cluster,
        interval=interval,
        ready_file=ready_file,
    )
    _serve(settings, given)


def _serve(settings: ExplorerSettings, given: str) -> None:
    """Run the explorer; its errors are one line and an exit code (docs/explorer.md)."""
    from psyche.explorer.readonly import NotServable, shown_url
    from psyche.explorer.serve import serve

    try:
        asyncio.run(serve(settings))
    except KeyboardInterrupt:
        pass
    except NotServable as e:  # no source: a stored database that cannot be served read-only
        click.echo(f"error: --database {shown_url(given)}: {e}", err=True)
        sys.exit(2)
    except OSError as e:
        click.echo(f"explorer: cannot listen on {settings.host}:{settings.port}: {e}", err=True)
        sys.exit(1)
    except Exception as e:  # a database URL it cannot open, a schema from the future
        if type(e).__module__.startswith("sqlalchemy") or isinstance(e, RuntimeError):
            click.echo(f"explorer: database {settings.database!r}: {e}", err=True)
            sys.exit(2)
        raise


@explorer.command("cost")
@click.option("--rounds", default=1000, show_default=True, type=click.IntRange(10, 10**6))
@click.option("--clients", default=3, show_default=True, type=click.IntRange(1, 256))
@click.option("--witnesses", default=2, show_default=True, type=click.IntRange(1, 32))
@click.option("--centralized", default=None, help="Also count the calls to follow this server.")
@click.option("--rpc", default=None, help="Also count the RPC calls to follow --run-id here.")
@click.option("--ws-rpc", default=None, help="Websocket URL ('none': poll only).")
@click.option("--run-id", default=None)
@click.option("--seconds", default=60.0, show_default=True, type=click.FloatRange(5, 3600))
def cost_cmd(
    rounds: int,
    clients: int,
    witnesses: int,
    centralized: str | None,
    rpc: str | None,
    ws_rpc: str | None,
    run_id: str | None,
    seconds: float,
) -> None:
    """Measure the indexer: database bytes per 1,000 rounds (both backends, a synthetic run
    through the real store) and, given a live source, its calls per minute. Prints JSON."""
    import json
    import tempfile

    from psyche.explorer.cost import calls_per_minute, database_bytes

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    out: dict[str, object] = {
        "database_solana": database_bytes(rounds, clients, witnesses, solana=True),
        "database_centralized": database_bytes(rounds, clients, witnesses, solana=False),
    }
    if centralized or (rpc and run_id):
        from psyche.explorer.schema import open_engine
        from psyche.explorer.store import Store

        with tempfile.TemporaryDirectory() as tmp:
            store = Store(open_engine(f"{tmp}/cost.sqlite"))
            if centralized:
                from psyche.explorer.centralized import CentralizedSource

                src = CentralizedSource(store, centralized)
                out["calls_centralized"] = asyncio.run(calls_per_minute(src, seconds))
            if rpc and run_id:
                from psyche.explorer.solana import SolanaSource, SolanaTarget
                from psyche.solana.session import websocket_url

                ws = None if ws_rpc == "none" else ws_rpc or websocket_url(rpc)
                solana = SolanaSource(store, SolanaTarget(rpc=rpc, ws=ws, run_id=run_id))
                out["calls_solana"] = asyncio.run(calls_per_minute(solana, seconds))
    click.echo(json.dumps(out, indent=1))
