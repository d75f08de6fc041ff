"""``psyche-local-svm``: run the local SVM (an SVM behind an RPC front, not a validator).

    psyche-local-svm run [--rpc-port 8899] [--ws-port 8900] [--bind 127.0.0.1]
                         [--program ID=PATH.so ...] [--deploy-dir target/deploy]
                         [--airdrop PUBKEY=LAMPORTS ...] [--ready-file PATH]

Without ``--program`` the repository's programs are loaded from ``target/deploy`` with the ids of
``Anchor.toml``; with ``--program`` only those are, plus the default ones when ``--deploy-dir``
is given too. ``--ready-file`` receives ``{"rpc": URL, "ws": URL}`` once both fronts listen.
Ctrl+C or SIGTERM stops it cleanly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

import click
from solders.pubkey import Pubkey

from psyche.localsvm.programs import MissingProgramError, deploy_programs, repo_root
from psyche.localsvm.server import AirdropError, LocalSvm

__all__ = ["main"]


def _pair(value: str, what: str) -> tuple[str, str]:
    left, sep, right = value.partition("=")
    if not sep or not left or not right:
        raise click.BadParameter(f"{value!r}: expected {what}")
    return left, right


def _pubkey(text: str) -> Pubkey:
    try:
        return Pubkey.from_string(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a base58 public key") from None


def _write_ready(path: Path, rpc: str, ws: str) -> None:
    # Written whole, then renamed, so a launcher polling for it never reads half a file.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"rpc": rpc, "ws": ws}) + "\n")
    os.replace(tmp, path)


async def _serve(node: LocalSvm, ready_file: Path | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with node:
        click.echo(f"RPC URL: {node.url}")
        click.echo(f"WebSocket URL: {node.ws_url}")
        if ready_file is not None:
            _write_ready(ready_file, node.url, node.ws_url)
        sys.stdout.flush()
        await stop.wait()
    click.echo("stopped")


@click.group()
def main() -> None:
    """Local Solana environment: the programs on LiteSVM behind a validator's JSON-RPC and
    websocket fronts (one process; no consensus, gossip or leader schedule)."""


@main.command()
@click.option("--rpc-port", type=click.IntRange(0, 65535), default=8899, show_default=True)
@click.option(
    "--ws-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Websocket port [default: RPC port + 1, as a validator].",
)
@click.option("--bind", "host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--program",
    "programs",
    multiple=True,
    metavar="PROGRAM_ID=PATH",
    help="Load an SBF program (repeatable).",
)
@click.option(
    "--deploy-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the default programs' .so are [default: <repo>/target/deploy].",
)
@click.option(
    "--airdrop",
    "airdrops",
    multiple=True,
    metavar="PUBKEY=LAMPORTS",
    help="Fund an account from the faucet at start (repeatable).",
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='Write {"rpc": URL, "ws": URL} here once listening.',
)
@click.option("--log-level", default="info", show_default=True)
def run(
    rpc_port: int,
    ws_port: int | None,
    host: str,
    programs: tuple[str, ...],
    deploy_dir: Path | None,
    airdrops: tuple[str, ...],
    ready_file: Path | None,
    log_level: str,
) -> None:
    """Serve JSON-RPC over HTTP and pubsub over websocket."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    sources: dict[Pubkey, Path | str | bytes] = {}
    if not programs or deploy_dir is not None:
        sources.update(deploy_programs(deploy_dir or repo_root() / "target" / "deploy"))
    for item in programs:
        pid, path = _pair(item, "PROGRAM_ID=PATH")
        sources[_pubkey(pid)] = Path(path)
    funds: dict[Pubkey, int] = {}
    for item in airdrops:
        key, amount = _pair(item, "PUBKEY=LAMPORTS")
        try:
            funds[_pubkey(key)] = int(amount)
        except ValueError:
            raise click.BadParameter(f"{amount!r} is not a number of lamports") from None
    try:
        node = LocalSvm(sources, host=host, rpc_port=rpc_port, ws_port=ws_port, airdrops=funds)
        asyncio.run(_serve(node, ready_file))
    except MissingProgramError as e:
        raise click.ClickException(str(e)) from None
    except (OSError, AirdropError) as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from None


if __name__ == "__main__":
    main()
