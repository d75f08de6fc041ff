"""Solana local testnet launcher (psyche-solana-local-testnet): a local SVM with both programs,
the run creator's documented flow, and N ``psyche-solana-client train`` joiners on this machine.

Same flags, per-round lines, TUI, summary and plot as ``psyche-centralized-local-testnet``
(:mod:`psyche.cli.testnet`); what differs is the coordinator side (``psyche.testnet.solana``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from psyche.cli.exit_codes import CliGroup
from psyche.cli.help_markdown import add_print_all_help
from psyche.cli.process_exit import ProcessMain
from psyche.cli.solana_options import check_run_id
from psyche.cli.testnet import net_options, run_and_report, testnet_options

DEFAULT_CONFIG = Path(__file__).resolve().parents[3] / "config" / "tiny-solana"


@click.group(cls=CliGroup)
def solana_testnet() -> None:
    """Solana local testnet launcher (psyche-solana-local-testnet): a local SVM running the
    programs plus N Solana clients on this machine."""


@solana_testnet.command("start")
@testnet_options(DEFAULT_CONFIG)
@click.option(
    "--run-id",
    default=None,
    envvar="RUN_ID",
    callback=check_run_id,
    help="Default: the config's run_id (at most 32 bytes).",
)
@click.option("--rpc-port", default=0, show_default=True, envvar="SVM_RPC_PORT", help="0: free.")
@click.option(
    "--ws-port", default=0, show_default=True, envvar="SVM_WS_PORT", help="0: RPC port + 1 or free."
)
@click.option(
    "--rpc",
    default=None,
    help="Use this chain (URL or moniker; e.g. a solana-test-validator holding both programs) "
    "instead of starting a local SVM; wallets are funded with requestAirdrop.",
)
@click.option("--ws-rpc", default=None, help="Its websocket URL (default: derived from --rpc).")
@click.option(
    "--validator",
    type=click.Choice(["local-svm", "real"]),
    default="local-svm",
    show_default=True,
    help="Without --rpc, the chain to start: the local SVM, or a real solana-test-validator "
    "(built by scripts/validator.sh, or PSYCHE_VALIDATOR_BIN).",
)
@click.option(
    "--p2p-base-port",
    default=0,
    show_default=True,
    envvar="P2P_BASE_PORT",
    help="Client N listens on base + N (0: a free port each).",
)
@click.option(
    "--bootstrap-peers",
    is_flag=True,
    help="Also hand every client the others' multiaddrs (by default they find each other only "
    "through their peer records on the chain).",
)
@click.option(
    "--emulate-internet",
    is_flag=True,
    help="Run each client in its own network namespace on an emulated internet (needs root, "
    "ip, tc and iptables): public or behind a NAT router, with shaped links.",
)
@click.option(
    "--nat-clients",
    default="",
    metavar="N,N,…",
    help="With --emulate-internet: the clients (1-based) behind their own NAT.",
)
@click.option(
    "--uplink-mbps", type=float, default=None, help="With --emulate-internet: uplink rate."
)
@click.option(
    "--downlink-mbps", type=float, default=None, help="With --emulate-internet: downlink rate."
)
@click.option(
    "--joiners",
    type=click.IntRange(0, 16),
    default=0,
    show_default=True,
    help="Also fund and authorize N wallets (keys/joinerK.json) for clients started by hand "
    "(`just start-training-localnet-client`); the command for each is printed.",
)
@click.option(
    "--treasurer",
    is_flag=True,
    help="Create the run through the Treasurer, paying a test SPL mint per point (the mint and "
    "the Run are written to <out>/treasurer.json).",
)
@click.option(
    "--earning-rate",
    type=click.IntRange(0),
    default=None,
    help="Points the Healthy clients share per epoch (default: none; with --treasurer 3000).",
)
@click.option(
    "--treasurer-collateral-per-point",
    "collateral_per_point",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="With --treasurer: token base units paid per point.",
)
@click.option(
    "--treasurer-top-up",
    type=click.IntRange(1),
    default=10**12,
    show_default=True,
    help="With --treasurer: base units the run creator puts into the escrow.",
)
def start(
    tui: bool | None,
    emulate_internet: bool,
    nat_clients: str,
    uplink_mbps: float | None,
    downlink_mbps: float | None,
    **kw: Any,
) -> None:
    """Start a local SVM, create and configure the run as its creator, authorize NUM_CLIENTS
    wallets, start them from their env files, follow the run, write the summary and plot."""
    from psyche.protocol.strict_obj import ConfigError
    from psyche.testnet.internet import InternetOptions, available
    from psyche.testnet.solana import SolanaTestnetOptions, make_solana_testnet

    console = Console(soft_wrap=True)
    internet = None
    if emulate_internet:
        ok, why = available()
        if not ok:
            raise click.UsageError(f"--emulate-internet: {why}")
        try:
            nats = tuple(int(n) for n in nat_clients.replace(",", " ").split())
        except ValueError:
            raise click.BadParameter(
                "a comma-separated list of client numbers", param_hint="--nat-clients"
            ) from None
        internet = InternetOptions(nats, uplink_mbps, downlink_mbps)
    elif nat_clients or uplink_mbps or downlink_mbps:
        raise click.UsageError("--nat-clients and the link rates need --emulate-internet")
    if kw["validator"] == "real" and (kw["rpc"] or emulate_internet):
        # The validator listens on loopback: the emulated internet's namespaces cannot reach it.
        raise click.UsageError(
            "--validator real starts its own chain on loopback: "
            "not with --rpc or --emulate-internet"
        )
    options = SolanaTestnetOptions(**net_options(kw), internet=internet, **kw)
    try:
        if options.validator == "real":
            from psyche.testnet.validator import find_validator

            find_validator()  # before any input is made: the build takes hours
        net = make_solana_testnet(options, lambda m: console.print(m))
    except (ConfigError, ValueError, RuntimeError) as e:
        console.print(f"[red]cannot start[/]: {e}")
        sys.exit(1)
    run_and_report(net, console, tui)


add_print_all_help(solana_testnet, "psyche-solana-local-testnet")

main = ProcessMain(solana_testnet)
"""The ``psyche-solana-local-testnet`` process."""
