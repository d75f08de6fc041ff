"""The Mining Pool's ``psyche-solana-client`` commands (docs/rewards.md, "Mining Pool"): the pool
authority's ``mining-pool-create``, ``-update``, ``-withdraw`` and ``-redeemable-deposit``, the
lender's ``mining-pool-deposit`` and ``-claim``, and the read-only ``json-dump-user``. What they
send is in :mod:`psyche.solana.programs.mining_pool`; :mod:`psyche.cli.solana` registers them.

Amounts are token base units (integers), as the program counts them.
"""

from __future__ import annotations

from typing import Any

import click

from psyche.cli.solana_options import (
    check_run_id,
    common,
    echo_result,
    read_only,
    run_async,
    to_pubkey,
)

U64_MAX = 2**64 - 1


def _pool_index(**kw: Any) -> Any:
    return click.option(
        "--pool-index",
        envvar="POOL_INDEX",
        type=click.IntRange(0, U64_MAX),
        help='The pool\'s index (its address is the PDA ["Pool", index u64 LE]).',
        **kw,
    )


pool_index_option = _pool_index(required=True)


def _amount_option(what: str, *, required: bool = True) -> Any:
    return click.option(
        "--amount",
        envvar="AMOUNT",
        type=click.IntRange(1, U64_MAX),
        required=required,
        default=None,
        help=f"{what}, in token base units.",
    )


@click.command("mining-pool-create")
@common
@pool_index_option
@click.option(
    "--collateral-mint", envvar="COLLATERAL_MINT", required=True, help="What lenders deposit."
)
@click.option(
    "--redeemable-mint", envvar="REDEEMABLE_MINT", required=True, help="What lenders are paid."
)
@click.option(
    "--max-deposit",
    envvar="MAX_DEPOSIT",
    type=click.IntRange(0, U64_MAX),
    required=True,
    help="Cap on the pool's total collateral deposits, in base units.",
)
def pool_create_cmd(
    session: Any, pool_index: int, collateral_mint: str, redeemable_mint: str, max_deposit: int
) -> None:
    """Create mining pool POOL_INDEX with the wallet as its authority."""
    from psyche.solana.programs import mining_pool

    echo_result(
        run_async(
            session,
            mining_pool.pool_create(
                session,
                pool_index,
                to_pubkey(collateral_mint),
                to_pubkey(redeemable_mint),
                max_deposit,
            ),
        )
    )


@click.command("mining-pool-update")
@common
@pool_index_option
@click.option(
    "--max-deposit",
    envvar="MAX_DEPOSIT",
    type=click.IntRange(0, U64_MAX),
    default=None,
    help="New cap (not below what was deposited; not once frozen).",
)
@click.option(
    "--freeze",
    envvar="FREEZE",
    is_flag=True,
    default=False,
    help="Freeze the pool (one-way): deposits stop, earnings can be deposited and claimed.",
)
def pool_update_cmd(session: Any, pool_index: int, max_deposit: int | None, freeze: bool) -> None:
    """Change the pool's cap and/or freeze it (the pool's authority only)."""
    from psyche.solana.programs import mining_pool

    if max_deposit is None and not freeze:
        raise click.UsageError("nothing to update: give --max-deposit and/or --freeze")
    echo_result(
        run_async(
            session,
            mining_pool.pool_update(session, pool_index, max_deposit, True if freeze else None),
        )
    )


@click.command("mining-pool-deposit")
@common
@pool_index_option
@_amount_option("Collateral to deposit")
def deposit_cmd(session: Any, pool_index: int, amount: int) -> None:
    """Lend AMOUNT collateral to the pool from the wallet's associated token account (the
    wallet's lender account is created on its first deposit)."""
    from psyche.solana.programs import mining_pool

    echo_result(run_async(session, mining_pool.deposit(session, pool_index, amount)))


@click.command("mining-pool-withdraw")
@common
@pool_index_option
@_amount_option("Collateral to withdraw")
def withdraw_cmd(session: Any, pool_index: int, amount: int) -> None:
    """Take AMOUNT collateral out of the pool to buy compute (the pool's authority only), into
    the wallet's associated token account (created if missing)."""
    from psyche.solana.programs import mining_pool

    echo_result(run_async(session, mining_pool.withdraw(session, pool_index, amount)))


@click.command("mining-pool-redeemable-deposit")
@common
@pool_index_option
@_amount_option("Redeemable tokens (earnings) to deposit")
def redeemable_deposit_cmd(session: Any, pool_index: int, amount: int) -> None:
    """Deposit AMOUNT of earnings (redeemable tokens) from the wallet's associated token account
    into the frozen pool (the pool's authority only), for the lenders to claim."""
    from psyche.solana.programs import mining_pool

    echo_result(run_async(session, mining_pool.redeemable_deposit(session, pool_index, amount)))


@click.command("mining-pool-claim")
@common
@pool_index_option
@_amount_option("Redeemable tokens to claim (default: all claimable)", required=False)
def claim_cmd(session: Any, pool_index: int, amount: int | None) -> None:
    """Claim the wallet's share of the frozen pool's earnings, floor(total redeemable ×
    deposited / total deposited) minus what it claimed, into its associated token account."""
    from psyche.solana.programs import mining_pool

    echo_result(run_async(session, mining_pool.claim(session, pool_index, amount)))


@click.command("json-dump-user")
@read_only
@click.option(
    "--address",
    envvar="ADDRESS",
    default=None,
    help="The user's wallet public key (default: the wallet's).",
)
@click.option(
    "--run-id",
    envvar="RUN_ID",
    default=None,
    callback=check_run_id,
    help="Also show the user's registration (points) in this run.",
)
@_pool_index(multiple=True, default=())
def json_dump_user_cmd(
    session: Any,
    address: str | None,
    run_id: str | None,
    pool_index: tuple[int, ...],
    own_pubkey: Any,
) -> None:
    """Print a user's state as JSON: its lender account in each --pool-index (deposited,
    claimed, claimable), its token balances of those pools' mints, and with --run-id its
    coordinator registration (points earned and slashed) and, for a run created through the
    Treasurer, its rewards there (points claimed and claimable)."""
    from psyche.solana.programs import mining_pool

    user = to_pubkey(address) if address is not None else own_pubkey
    if user is None:
        raise click.UsageError("no user: pass --address (or a wallet)")
    echo_result(run_async(session, mining_pool.dump_user(session, user, run_id, list(pool_index))))


COMMANDS = (
    pool_create_cmd,
    pool_update_cmd,
    deposit_cmd,
    withdraw_cmd,
    redeemable_deposit_cmd,
    claim_cmd,
    json_dump_user_cmd,
)
