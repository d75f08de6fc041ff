"""Centralized server (psyche-centralized-server): hosts the coordinator over TCP.

``validate-config`` checks a run's ``state.toml`` (and ``data.toml``) before anything is started;
``run`` serves the run (see :mod:`psyche.backends.centralized.app`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from psyche.cli.exit_codes import CliGroup
from psyche.cli.help_markdown import add_print_all_help
from psyche.cli.input_files import InputFile
from psyche.cli.process_exit import ProcessMain
from psyche.protocol.locations import ServerData
from psyche.protocol.model import LLM
from psyche.protocol.optimizers import DistroOptimizer, SparseLoCoOptimizer
from psyche.protocol.run_file import DataConfig, RunConfig, load_data_config, load_run_config
from psyche.protocol.strict_obj import ConfigError, to_obj


def _printable(text: str) -> str:
    """``text`` as one line of plain text: control characters (newlines from a quoted TOML key,
    terminal escapes) shown as escapes, rich markup (``[/]`` in a value) escaped."""
    return escape(
        "".join(
            ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode()
            for ch in text
        )
    )


@click.group(cls=CliGroup)
def server() -> None:
    """Centralized coordinator server (psyche-centralized-server)."""


@server.command("validate-config")
@click.option(
    "--state",
    "state_path",
    required=True,
    envvar="PSYCHE_STATE",
    type=InputFile(parse="toml"),
    help="Run state file (state.toml).",
)
@click.option(
    "--data-config",
    "data_path",
    envvar="PSYCHE_DATA_CONFIG",
    type=InputFile(parse="toml"),
    help="TCP data server settings (data.toml); needed when data_location is Server.",
)
@click.option(
    "--run-id",
    default=None,
    help="Run id for a file without run_id (a Solana run config, whose id is given to "
    "psyche-solana-client --run-id); a run_id in the file wins.",
)
def validate_config(state_path: str, data_path: str | None, run_id: str | None) -> None:
    """Check STATE (and DATA) against every rule; exit 0 with a summary, 1 naming the bad key.

    Risky but valid settings (a witness quorum one member can reach) are warnings in yellow.
    File contents are printed escaped: a key or value like ``[/]`` is text, not rich markup."""
    out = Console()
    # No highlighting: a warning stays one colour, numbers in it included.
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    try:
        rc = load_run_config(state_path, require_run_id=run_id is None)
        if rc.run_id is None:
            rc = dataclasses.replace(rc, run_id=run_id)
            rc.check()
        data = load_data_config(data_path) if data_path else None
        if data is not None:
            assert isinstance(rc.model, LLM)
            data.check_model(rc.model, data_path or "")
    except ConfigError as e:
        err.print(f"[bold red]invalid config[/]: {_printable(str(e))}")
        sys.exit(1)
    llm = rc.model
    assert isinstance(llm, LLM)
    if isinstance(llm.data_location, ServerData) and data is None:
        err.print(
            "[yellow]note[/]: model.LLM.data_location is Server; pass --data-config data.toml "
            "to check the data server settings too"
        )
    for w in (*rc.warnings, *rc.advisories()):
        err.print(f"[yellow]warning: {_printable(w)}[/]")
    out.print(_summary(rc, llm, data))


def _summary(rc: RunConfig, llm: LLM, data: DataConfig | None) -> Table:
    """What ``validate-config`` prints of a valid run: its clients, batch, steps and times, the
    model, optimizer and data, in one table (values escaped: text, not rich markup)."""
    c = rc.config
    t = Table(title=_printable(f"run {rc.run_id!r} is valid"), show_header=False)
    t.add_row("clients", f"start with {c.init_min_clients}, keep at least {c.min_clients}")
    t.add_row("witnesses", str(c.witness_nodes or "min(#clients, 32)"))
    t.add_row("batch", f"{c.global_batch_size_start} → {c.global_batch_size_end} samples")
    t.add_row("steps", str(c.total_steps))
    t.add_row(
        "times (s)",
        f"warmup {c.warmup_time}, round {c.max_round_train_time}+{c.round_witness_time}, "
        f"epoch {c.epoch_time}, cooldown {c.cooldown_time}",
    )
    t.add_row("model", f"{llm.architecture.name}, seq {llm.max_seq_len}")
    t.add_row("checkpoint", _printable(str(to_obj(llm.checkpoint))))
    t.add_row("data", _printable(str(to_obj(llm.data_location))))
    t.add_row("lr", _printable(str(to_obj(llm.lr_schedule))))
    opt = llm.optimizer
    if isinstance(opt, DistroOptimizer):
        t.add_row(
            "optimizer",
            f"DisTrO chunk {opt.compression_chunk}, top-k {opt.compression_topk}, "
            f"1-bit {opt.quantize_1bit}",
        )
    elif isinstance(opt, SparseLoCoOptimizer):
        t.add_row(
            "optimizer",
            f"SparseLoCo H {opt.inner_steps}, top-k {opt.topk}/{opt.topk_chunk}, "
            f"{opt.value_bits}-bit, outer lr {opt.outer_lr:g} momentum {opt.outer_momentum:g}",
        )
    if data is not None:
        t.add_row(
            "data server", _printable(f"{data.dir} ({data.token_size.name}, seq {data.seq_len})")
        )
    return t


def _setup_logging(console: Console, tui: bool, verbose: bool) -> None:
    from rich.logging import RichHandler

    # With the TUI the status view shows the events; the log keeps only warnings above it.
    level = logging.DEBUG if verbose else logging.WARNING if tui else logging.INFO
    handler: logging.Handler
    if console.is_terminal or tui:
        handler = RichHandler(console=console, show_path=False)
        fmt = "%(message)s"
    else:
        # Redirected output (files, service managers, tests): one plain line per record.
        handler = logging.StreamHandler(sys.stderr)
        fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level, format=fmt, handlers=[handler], force=True)
    spec = os.environ.get("PSYCHE_LOG")
    if spec:
        from psyche.cli.logs import apply_log_spec

        apply_log_spec(spec)  # the local testnet's --log


@server.command("run")
@click.option(
    "--state",
    "state_path",
    required=True,
    envvar="PSYCHE_STATE",
    type=InputFile(parse="toml", path_type=Path),
    help="Run state file (state.toml).",
)
@click.option(
    "-s",
    "--server-port",
    default=0,
    envvar="PSYCHE_SERVER_PORT",
    type=click.IntRange(0, 65535),
    help="TCP port for clients (default: a free port, printed at start).",
)
@click.option(
    "--host",
    default="0.0.0.0",
    show_default=True,
    envvar="PSYCHE_SERVER_HOST",
    help="Address to listen on (clients and the data server).",
)
@click.option(
    "--data-config",
    envvar="PSYCHE_DATA_CONFIG",
    type=InputFile(parse="toml", path_type=Path),
    help="data.toml of the TCP data server; required when data_location is Server.",
)
@click.option(
    "--save-state-dir",
    envvar="PSYCHE_SAVE_STATE_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="Save the state at each epoch end here; restore the newest on start.",
)
@click.option(
    "--init-warmup-time",
    envvar="PSYCHE_INIT_WARMUP_TIME",
    type=click.IntRange(1),
    help="Seconds of warmup until the run is first active (default: config.warmup_time).",
)
@click.option(
    "--withdraw-on-disconnect",
    default=True,
    show_default=True,
    envvar="PSYCHE_WITHDRAW_ON_DISCONNECT",
    type=click.BOOL,
    help="Withdraw a client from the epoch when its connection drops.",
)
@click.option(
    "--tui",
    default=None,
    envvar="PSYCHE_TUI",
    type=click.BOOL,
    help="Live status view (default: true on a terminal); false logs lines instead.",
)
@click.option(
    "--events-file",
    default=None,
    envvar="PSYCHE_EVENTS_FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append one JSON line per published state (for summaries and monitoring).",
)
@click.option(
    "--status-port",
    default=None,
    envvar="PSYCHE_STATUS_PORT",
    type=click.IntRange(0, 65535),
    help="Serve the read-only GET /status endpoint (JSON, for the run explorer) on this port "
    "(0: a free one, logged); default: none.",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def run_cmd(
    state_path: Path,
    server_port: int,
    host: str,
    data_config: Path | None,
    save_state_dir: Path | None,
    init_warmup_time: int | None,
    withdraw_on_disconnect: bool,
    tui: bool | None,
    events_file: Path | None,
    status_port: int | None,
    verbose: bool,
) -> None:
    """Host the coordinator of STATE for clients on TCP until interrupted."""
    from psyche.backends.centralized.app import ServerSettings, serve
    from psyche.data.provider import DataError

    console = Console(stderr=True)
    use_tui = console.is_terminal if tui is None else tui
    _setup_logging(console, use_tui, verbose)
    settings = ServerSettings(
        state=state_path,
        host=host,
        port=server_port,
        data_config=data_config,
        save_state_dir=save_state_dir,
        init_warmup_time=init_warmup_time,
        withdraw_on_disconnect=withdraw_on_disconnect,
        tui=use_tui,
        events_file=events_file,
        status_port=status_port,
    )
    try:
        asyncio.run(serve(settings, console))
    except (ConfigError, DataError) as e:
        console.print(f"[bold red]cannot start the server[/]: {e}")
        sys.exit(1)
    except OSError as e:
        console.print(f"[bold red]cannot listen[/] (port {server_port} or the data port): {e}")
        sys.exit(1)


add_print_all_help(server, "psyche-centralized-server")

main = ProcessMain(server)
"""The ``psyche-centralized-server`` process."""
