"""Local testnet launcher (psyche-centralized-local-testnet): a server plus N clients here.

The flags, the per-round lines, the TUI and the closing report are shared with
``psyche-solana-local-testnet`` (:mod:`psyche.cli.solana_testnet`), which imports them from here.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from psyche.cli.exit_codes import CliGroup
from psyche.cli.help_markdown import add_print_all_help
from psyche.cli.input_files import InputFile
from psyche.cli.paths import AbsolutePath, absolute_entries
from psyche.cli.process_exit import ProcessMain

if TYPE_CHECKING:
    from psyche.testnet.base import LocalTestnet
    from psyche.testnet.summary import Summary

DEFAULT_CONFIG = Path(__file__).resolve().parents[3] / "config" / "tiny"

F = TypeVar("F", bound=Callable[..., Any])


@click.group(cls=CliGroup)
def testnet() -> None:
    """Local testnet launcher (psyche-centralized-local-testnet): a server plus N clients on
    this machine."""


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def client_numbers(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--allowed-to-kill``: comma-separated client numbers ≥ 1, checked when parsed."""
    try:
        numbers = ints(value)
    except ValueError:
        raise click.BadParameter(f"{value[:40]!r}: expected client numbers like 1,3") from None
    if any(n < 1 for n in numbers):
        raise click.BadParameter("client numbers start at 1")
    return value


def testnet_options(default_config: Path) -> Callable[[F], F]:
    """The flags both testnets take, with the same names and environment twins."""
    options = [
        click.option("--num-clients", default=3, show_default=True, envvar="NUM_CLIENTS"),
        click.option(
            "--config-path",
            default=str(default_config),
            show_default=True,
            envvar="CONFIG_PATH",
            type=InputFile(
                file_okay=False,
                inside=("state.toml",),
                inside_if_present=("data.toml",),
                absolute=True,
            ),
            help="Directory with state.toml (and data.toml for a Server data location).",
        ),
        click.option("--random-kill-num", default=0, show_default=True, envvar="RANDOM_KILL_NUM"),
        click.option(
            "--random-kill-interval",
            default=120.0,
            show_default=True,
            envvar="RANDOM_KILL_INTERVAL",
        ),
        click.option(
            "--allowed-to-kill",
            default="",
            envvar="ALLOWED_TO_KILL",
            callback=client_numbers,
            help="1-based client numbers.",
        ),
        click.option("--tui", default=None, type=click.BOOL, envvar="PSYCHE_TUI"),
        click.option(
            "--epochs", default=None, type=int, envvar="EPOCHS", help="Stop after E epochs."
        ),
        click.option(
            "--summary",
            default=None,
            type=AbsolutePath(dir_okay=False),
            envvar="SUMMARY_PATH",
            help="Summary JSON path (PNG written beside it).",
        ),
        click.option(
            "--out",
            default=None,
            type=AbsolutePath(file_okay=False),
            envvar="TESTNET_OUT",
            help="Logs, keys and events (default runs/<run>-testnet).",
        ),
        click.option("--device", default="cpu", show_default=True, envvar="PSYCHE_DEVICE"),
        click.option("--micro-batch-size", default=2, show_default=True, envvar="MICRO_BATCH_SIZE"),
        click.option("--timeout", default=3600.0, show_default=True, envvar="TESTNET_TIMEOUT"),
        click.option(
            "--log",
            default=None,
            envvar="PSYCHE_LOG",
            help="Log levels of every child: LEVEL[,logger=LEVEL…] (e.g. warn,psyche=debug).",
        ),
        click.option(
            "--write-log",
            is_flag=True,
            default=False,
            help="Each client also writes its log to <out>/write-logs/<client>.log.",
        ),
        click.option(
            "--first-client-checkpoint",
            default=None,
            help="Hugging Face repo (owner/name[@revision]) or model directory the run's model "
            "and config are loaded from, instead of the config's checkpoint.",
        ),
        click.option("--hf-token", default=None, help="HF_TOKEN for the clients (Hub access)."),
        click.option(
            "--wandb-project",
            default=None,
            help="Log each client to W&B (run <run>-<client>; offline without WANDB_API_KEY, "
            "kept under <out>/wandb).",
        ),
        click.option("--wandb-group", default=None),
        click.option("--wandb-entity", default=None),
        click.option("--eval-tasks", default=None, help="The clients' --eval-tasks."),
        click.option(
            "--optim-stats",
            default=None,
            type=click.IntRange(1),
            help="The clients' --optim-stats-steps.",
        ),
        click.option(
            "--write-distro-data",
            default=None,
            type=AbsolutePath(file_okay=False),
            help="Each client writes every payload to <dir>/<client>/.",
        ),
    ]

    options.append(
        click.option(
            "--explorer",
            default=None,
            envvar="TESTNET_EXPLORER_PORT",
            type=click.IntRange(0, 65535),
            help="Also run the run explorer (psyche explorer serve) on this port (0: a free one) "
            "and print its URL: the run, live, in a browser.",
        )
    )

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def net_options(kw: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :class:`~psyche.testnet.base.NetOptions` from the flags of
    :func:`testnet_options` (removed from ``kw``; ``tui`` stays, it is not an option of the net)."""
    return {
        "config_path": kw.pop("config_path"),
        "num_clients": kw.pop("num_clients"),
        "out_dir": kw.pop("out"),
        "summary_path": kw.pop("summary"),
        "epochs": kw.pop("epochs"),
        "random_kill_num": kw.pop("random_kill_num"),
        "random_kill_interval": kw.pop("random_kill_interval"),
        "allowed_to_kill": ints(kw.pop("allowed_to_kill")),
        "device": kw.pop("device"),
        "micro_batch_size": kw.pop("micro_batch_size"),
        "timeout_s": kw.pop("timeout"),
        "log": kw.pop("log"),
        "write_log": kw.pop("write_log"),
        "first_client_checkpoint": kw.pop("first_client_checkpoint"),
        "hf_token": kw.pop("hf_token"),
        "wandb_project": kw.pop("wandb_project"),
        "wandb_group": kw.pop("wandb_group"),
        "wandb_entity": kw.pop("wandb_entity"),
        "eval_tasks": absolute_entries(kw.pop("eval_tasks")),
        "optim_stats": kw.pop("optim_stats"),
        "write_distro_data": kw.pop("write_distro_data"),
        "explorer_port": kw.pop("explorer"),
    }


@testnet.command("start")
@testnet_options(DEFAULT_CONFIG)
@click.option(
    "--server-port",
    default=0,
    envvar="PSYCHE_SERVER_PORT",
    type=click.IntRange(0, 65535),
    help="The server's port (default: a free port, so two testnets never collide).",
)
def start(tui: bool | None, **kw: Any) -> None:
    """Start the server and NUM_CLIENTS clients, follow the run, write the summary and plot."""
    from psyche.protocol.strict_obj import ConfigError
    from psyche.testnet.launcher import TestnetOptions, make_testnet

    console = Console(soft_wrap=True)
    options = TestnetOptions(**net_options(kw), **kw)
    try:
        net = make_testnet(options, lambda m: console.print(m))
    except ConfigError as e:
        console.print(f"[red]invalid config[/]: {e}")
        sys.exit(1)
    run_and_report(net, console, tui)


def run_and_report(net: LocalTestnet, console: Console, tui: bool | None) -> None:
    """Run the testnet, print one line per round (or the TUI), then one per epoch and the end;
    write the summary and the plot. Exits 1 if the run failed or timed out; when a child the
    testnet needs failed (the server, the local SVM, a setup step), its own last error line is
    printed and its exit code is the launcher's."""
    from psyche.testnet.base import finish

    # SIGTERM (a supervisor, a test's cleanup) unwinds like Ctrl-C, so every child is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    use_tui = console.is_terminal if tui is None else tui
    console.print(f"testnet for run {net.config.run_id!r}: logs in {net.out}/logs")
    seen: set[tuple[int, int]] = set()

    logged = [0]

    def lines(n: object) -> None:
        # Rebuilding the summary reads every client log: only do it when the run moved on.
        if len(net.states()) == logged[0]:
            return
        logged[0] = len(net.states())
        s = net.summary()
        for r in s.rounds[:-1]:
            key = (r["epoch"], r["step"])
            if key in seen:
                continue
            seen.add(key)
            console.print(round_line(r))

    try:
        if use_tui:
            with Live(console=console, refresh_per_second=2) as live:
                result = net.run(lambda n: live.update(_status(net)))
        else:
            result = net.run(lines)
    except (RuntimeError, TimeoutError) as e:
        console.print(f"[bold red]testnet failed[/]: {e}")
        sys.exit(_failure_code(e, console))
    path, png = finish(net, result)
    _report(console, result, path, png)


def _report(console: Console, result: Summary, path: Path, png: Path) -> None:
    """The closing lines: one per trained epoch, the latest score of each client's evals, and
    the end (epochs, rounds, final loss, whether the weights agreed, what was written)."""
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
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for score in result.evals:
        latest[(score["client"], score["task"])] = score
    for (client, task), score in sorted(latest.items()):
        part = "" if score["complete"] else ", cut short"
        console.print(
            f"eval {client} {task} (step {score['step']}): acc {score['accuracy']:.3f}, "
            f"acc_norm {score['accuracy_norm']:.3f} over {score['docs']} docs{part}"
        )
    agree = all(len(set(r["model_hash"].values())) <= 1 for r in result.rounds)
    console.print(
        f"[bold]done[/]: {result.epochs_completed} epoch(s), {len(result.rounds)} rounds, "
        f"final loss {result.final_loss}, weights identical after every apply: {agree}; "
        f"rejected from peers: {rejections_text(result.rejections)}; wrote {path} and {png}"
    )


def _failure_code(error: Exception, console: Console) -> int:
    """A child that failed (:class:`~psyche.testnet.failures.ChildFailed`) has its own error
    line printed and its exit code returned; anything else is exit 1."""
    from psyche.testnet.failures import ChildFailed

    if not isinstance(error, ChildFailed):
        return 1
    if error.detail:
        console.print(error.detail, markup=False, highlight=False)
    return error.exit_code


def rejections_text(counts: dict[str, int]) -> str:
    """``none``, or the total and each kind (``3 (oversized_gossip=2, stale_result=1)``)."""
    if not counts:
        return "none"
    kinds = ", ".join(f"{k}={n}" for k, n in sorted(counts.items()))
    return f"{sum(counts.values())} ({kinds})"


def round_line(r: dict[str, Any]) -> str:
    losses = " ".join(f"{c}={v:.3f}" for c, v in r["loss"].items()) or "drain"
    hashes = set(r["model_hash"].values())
    agree = "identical" if len(hashes) == 1 else f"{len(hashes)} distinct"
    return (
        f"epoch {r['epoch']} step {r['step']:3d} round {r['height']:2d} "
        f"{r['duration_s']:6.2f}s ({r['end_reason']}, {r['witnesses']} witnesses) "
        f"loss {losses} weights {agree}"
    )


def _status(net: LocalTestnet) -> Group:
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
    for col in ("client", "running", "joins", "kills", "drops", "rejected"):
        clients.add_column(col)
    for label, tally in sorted(s.clients.items()):
        proc = net.clients.get(label)
        running = proc is not None and proc.popen.poll() is None
        clients.add_row(
            label,
            "yes" if running else "no",
            str(tally.joins),
            str(tally.kills),
            str(tally.drops),
            rejections_text(tally.rejections),
        )
    return Group(table, clients)


add_print_all_help(testnet, "psyche-centralized-local-testnet")

main = ProcessMain(testnet)
"""The ``psyche-centralized-local-testnet`` process."""
