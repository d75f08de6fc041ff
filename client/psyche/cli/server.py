"""Centralized server (psyche-centralized-server): hosts the coordinator over TCP.

``validate-config`` checks a run's ``state.toml`` (and ``data.toml``) before anything is started.
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from psyche.protocol.config import LLM, DistroOptimizer, ServerData
from psyche.protocol.runconfig import load_data_config, load_run_config
from psyche.protocol.serde import ConfigError, to_obj


@click.group()
def server() -> None:
    """Centralized coordinator server (psyche-centralized-server)."""


@server.command("validate-config")
@click.option(
    "--state",
    "state_path",
    required=True,
    envvar="PSYCHE_STATE",
    type=click.Path(dir_okay=False),
    help="Run state file (state.toml).",
)
@click.option(
    "--data-config",
    "data_path",
    envvar="PSYCHE_DATA_CONFIG",
    type=click.Path(dir_okay=False),
    help="TCP data server settings (data.toml); needed when data_location is Server.",
)
def validate_config(state_path: str, data_path: str | None) -> None:
    """Check STATE (and DATA) against every rule; exit 0 with a summary, 1 naming the bad key."""
    out = Console()
    err = Console(stderr=True, soft_wrap=True)
    try:
        rc = load_run_config(state_path, require_run_id=True)
        data = load_data_config(data_path) if data_path else None
    except ConfigError as e:
        err.print(f"[bold red]invalid config[/]: {e}")
        sys.exit(1)
    llm = rc.model
    assert isinstance(llm, LLM)
    if isinstance(llm.data_location, ServerData) and data is None:
        err.print(
            "[yellow]note[/]: model.LLM.data_location is Server; pass --data-config data.toml "
            "to check the data server settings too"
        )
    for w in rc.warnings:
        err.print(f"[yellow]warning[/]: {w}")
    c = rc.config
    t = Table(title=f"run {rc.run_id!r} is valid", show_header=False)
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
    t.add_row("checkpoint", str(to_obj(llm.checkpoint)))
    t.add_row("data", str(to_obj(llm.data_location)))
    t.add_row("lr", str(to_obj(llm.lr_schedule)))
    opt = llm.optimizer
    if isinstance(opt, DistroOptimizer):
        t.add_row(
            "optimizer",
            f"DisTrO chunk {opt.compression_chunk}, top-k {opt.compression_topk}, "
            f"1-bit {opt.quantize_1bit}",
        )
    if data is not None:
        t.add_row("data server", f"{data.dir} ({data.token_size.name}, seq {data.seq_len})")
    out.print(t)
