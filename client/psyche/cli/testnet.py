"""Local testnet launcher (psyche-centralized-local-testnet): a server plus N clients here."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

DEFAULT_CONFIG = Path(__file__).resolve().parents[3] / "config" / "tiny"


@click.group()
def testnet() -> None:
    """Local testnet launcher (psyche-centralized-local-testnet): a server plus N clients on
    this machine."""


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


@testnet.command("start")
@click.option("--num-clients", default=3, show_default=True, envvar="NUM_CLIENTS")
@click.option(
    "--config-path",
    default=str(DEFAULT_CONFIG),
    show_default=True,
    envvar="CONFIG_PATH",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory with state.toml (and data.toml for a Server data location).",
)
@click.option("--server-port", default=20000, show_default=True, envvar="PSYCHE_SERVER_PORT")
@click.option("--random-kill-num", default=0, show_default=True, envvar="RANDOM_KILL_NUM")
@click.option(
    "--random-kill-interval", default=120.0, show_default=True, envvar="RANDOM_KILL_INTERVAL"
)
@click.option(
    "--allowed-to-kill", default="", envvar="ALLOWED_TO_KILL", help="1-based client numbers."
)
@click.option("--tui", default=None, type=click.BOOL, envvar="PSYCHE_TUI")
@click.option("--epochs", default=None, type=int, envvar="EPOCHS", help="Stop after E epochs.")
@click.option(
    "--summary",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SUMMARY_PATH",
    help="Summary JSON path (PNG written beside it).",
)
@click.option(
    "--out",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    envvar="TESTNET_OUT",
    help="Logs, keys and events (default runs/<run>-testnet).",
)
@click.option("--device", default="cpu", show_default=True, envvar="PSYCHE_DEVICE")
@click.option("--micro-batch-size", default=2, show_default=True, envvar="MICRO_BATCH_SIZE")
@click.option("--timeout", default=3600.0, show_default=True, envvar="TESTNET_TIMEOUT")
def start(
    num_clients: int,
    config_path: Path,
    server_port: int,
    random_kill_num: int,
    random_kill_interval: float,
    allowed_to_kill: str,
    tui: bool | None,
    epochs: int | None,
    summary: Path | None,
    out: Path | None,
    device: str,
    micro_batch_size: int,
    timeout: float,
) -> None:
    """Start the server and NUM_CLIENTS clients, follow the run, write the summary and plot."""
    from psyche.protocol.serde import ConfigError
    from psyche.testnet.launcher import TestnetOptions, finish, make_testnet

    console = Console(soft_wrap=True)
    options = TestnetOptions(
        config_path=config_path,
        num_clients=num_clients,
        server_port=server_port,
        out_dir=out,
        summary_path=summary,
        epochs=epochs,
        random_kill_num=random_kill_num,
        random_kill_interval=random_kill_interval,
        allowed_to_kill=_ints(allowed_to_kill),
        device=device,
        micro_batch_size=micro_batch_size,
        timeout_s=timeout,
    )
    try:
        net = make_testnet(options, lambda m: console.print(m))
    except ConfigError as e:
        console.print(f"[red]invalid config[/]: {e}")
        sys.exit(1)
    use_tui = console.is_terminal if tui is None else tui
    console.print(f"testnet for run {net.config.run_id!r}: logs in {net.out}/logs")
    seen: set[tuple[int, int]] = set()

    logged = [0]

    def lines(n: object) -> None:
        # Rebuilding the summary reads every client log: only do it when the server moved on.
        if len(net.states()) == logged[0]:
            return
        logged[0] = len(net.states())
        s = net.summary()
        for r in s.rounds[:-1]:
            key = (r["epoch"], r["step"])
            if key in seen:
                continue
            seen.add(key)
            losses = " ".join(f"{c}={v:.3f}" for c, v in r["loss"].items()) or "drain"
            hashes = set(r["model_hash"].values())
            agree = "identical" if len(hashes) == 1 else f"{len(hashes)} distinct"
            console.print(
                f"epoch {r['epoch']} step {r['step']:3d} round {r['height']:2d} "
                f"{r['duration_s']:6.2f}s ({r['end_reason']}, {r['witnesses']} witnesses) "
                f"loss {losses} weights {agree}"
            )

    try:
        if use_tui:
            with Live(console=console, refresh_per_second=2) as live:
                result = net.run(lambda n: live.update(_status(net)))
        else:
            result = net.run(lines)
    except (RuntimeError, TimeoutError) as e:
        console.print(f"[bold red]testnet failed[/]: {e}")
        sys.exit(1)
    path, png = finish(net, result)
    for ep in result.epochs:
        if not ep["steps"] and not ep["kills"]:
            continue  # the state the run ended in, not a trained epoch
        joiners = ", ".join(
            f"{j['client']} from {j['source']} ready in {j['ready_s']:.1f}s" for j in ep["joiners"]
        )
        kills = ", ".join(f"{k['client']}@{k['after_s']:.0f}s" for k in ep["kills"])
        console.print(
            f"epoch {ep['epoch']}: steps {ep['steps']}, {len(ep['clients'])} clients, "
            f"checkpoint {ep['checkpoint']} → {ep['checkpoint_after']}; "
            f"joiners: {joiners or 'none'}; kills: {kills or 'none'}"
        )
    agree = all(len(set(r["model_hash"].values())) <= 1 for r in result.rounds)
    console.print(
        f"[bold]done[/]: {result.epochs_completed} epoch(s), {len(result.rounds)} rounds, "
        f"final loss {result.final_loss}, weights identical after every apply: {agree}; "
        f"wrote {path} and {png}"
    )


def _status(net: object) -> Group:
    from psyche.testnet.launcher import Testnet

    assert isinstance(net, Testnet)
    s = net.summary()
    table = Table(title=f"run {net.config.run_id!r} — {s.final_state or 'starting'}")
    for col in ("epoch", "step", "round", "time s", "end", "witnesses", "mean loss", "weights"):
        table.add_column(col)
    for r in s.rounds[-12:]:
        loss = sum(r["loss"].values()) / len(r["loss"]) if r["loss"] else None
        agree = len(set(r["model_hash"].values())) <= 1
        table.add_row(
            str(r["epoch"]),
            str(r["step"]),
            str(r["height"]),
            f"{r['duration_s']:.2f}",
            r["end_reason"],
            str(r["witnesses"]),
            "-" if loss is None else f"{loss:.4f}",
            "identical" if agree else "DIFFER",
        )
    clients = Table(title="clients")
    for col in ("client", "running", "joins", "kills", "drops"):
        clients.add_column(col)
    for label, tally in sorted(s.clients.items()):
        proc = net.clients.get(label)
        running = proc is not None and proc.popen.poll() is None
        clients.add_row(
            label, "yes" if running else "no", str(tally.joins), str(tally.kills), str(tally.drops)
        )
    return Group(table, clients)
