"""The Treasurer's ``psyche-solana-client`` commands (docs/rewards.md, "Treasurer"): claim the
rewards a run's coordinator credited the wallet, top up a run's escrow, wind a run down and
close it, and create a test SPL mint for local testnets. ``create-run
--treasurer-collateral-mint`` is in :mod:`psyche.cli.solana_admin`; what they send is in
:mod:`psyche.solana.programs.treasurer_commands`. :mod:`psyche.cli.solana` registers them on
its group.
"""

from __future__ import annotations

from typing import Any

import click

from psyche.cli.solana_options import common, echo_result, run_async, run_id_option, to_pubkey

U64_MAX = 2**64 - 1


def parse_mint_to(values: tuple[str, ...]) -> list[tuple[Any, int]]:
    """``PUBKEY=AMOUNT`` items (each value may hold several, space-separated, as the env twin
    does) → (public key, base units)."""
    out = []
    for item in (part for value in values for part in value.split()):
        key, sep, amount = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not PUBKEY=AMOUNT", param_hint="--mint-to")
        try:
            n = int(amount)
        except ValueError:
            raise click.BadParameter(
                f"{item!r}: {amount!r} is not a whole number of base units",
                param_hint="--mint-to",
            ) from None
        if not 0 < n <= U64_MAX:
            raise click.BadParameter(
                f"{item!r}: the amount must be 1..=2^64-1", param_hint="--mint-to"
            )
        out.append((to_pubkey(key), n))
    return out


@click.command("treasurer-claim-rewards")
@common
@run_id_option
@click.option(
    "--points",
    envvar="TREASURER_CLAIM_POINTS",
    type=click.IntRange(1, U64_MAX),
    default=None,
    help="Points to claim (default: everything claimable).",
)
def claim_cmd(session: Any, run_id: str, points: int | None):
    """Claim the wallet's points in a Treasurer run, paid at the run's rate into the wallet's
    associated token account of the collateral mint (created if missing)."""
    from psyche.solana.programs import treasurer_commands as treasurer

    echo_result(run_async(session, treasurer.claim_rewards(session, run_id, points)))


@click.command("treasurer-top-up-rewards")
@common
@run_id_option
@click.option(
    "--amount",
    envvar="TREASURER_TOP_UP_AMOUNT",
    type=click.IntRange(1, U64_MAX),
    required=True,
    help="Base units of the collateral mint to move into the run's escrow.",
)
def top_up_cmd(session: Any, run_id: str, amount: int):
    """Move collateral tokens from the wallet's associated token account into the run's escrow
    (anyone may)."""
    from psyche.solana.programs import treasurer_commands as treasurer

    echo_result(run_async(session, treasurer.top_up_rewards(session, run_id, amount)))


@click.command("create-test-mint")
@common
@click.option(
    "--decimals",
    envvar="TEST_MINT_DECIMALS",
    type=click.IntRange(0, 255),
    required=True,
    help="Decimals of the new mint.",
)
@click.option(
    "--mint-to",
    envvar="TEST_MINT_TO",
    multiple=True,
    help="PUBKEY=AMOUNT (base units) minted to that wallet's associated token account; "
    "repeatable; the env twin is space-separated.",
)
def create_test_mint_cmd(session: Any, decimals: int, mint_to: tuple[str, ...]):
    """Create a classic SPL mint whose mint authority is the wallet (for local testnets) and
    mint to the given holders; prints the mint's address."""
    from psyche.solana.programs import treasurer_commands as treasurer

    holders = parse_mint_to(mint_to)
    echo_result(run_async(session, treasurer.create_test_mint(session, decimals, holders)))


@click.command("treasurer-wind-down")
@common
@run_id_option
def wind_down_cmd(session: Any, run_id: str):
    """Start winding a Treasurer run down (its main authority only): the coordinator pauses for
    good, participants keep claiming, and treasurer-close-run is allowed 7 days later."""
    from psyche.solana.programs import treasurer_commands as treasurer

    echo_result(run_async(session, treasurer.wind_down_run(session, run_id)))


@click.command("treasurer-close-run")
@common
@run_id_option
def close_run_cmd(session: Any, run_id: str):
    """Close a Treasurer run 7 days after treasurer-wind-down (its main authority only): the
    escrow's remainder goes to the wallet's associated token account, the rent of the escrow and
    of the coordinator's accounts to the wallet; unclaimed points are no longer payable."""
    from psyche.solana.programs import treasurer_commands as treasurer

    echo_result(run_async(session, treasurer.close_run(session, run_id)))


COMMANDS = (claim_cmd, top_up_cmd, create_test_mint_cmd, wind_down_cmd, close_run_cmd)
