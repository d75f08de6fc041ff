"""The JSON the ``mining-pool-*`` and ``json-dump-user`` commands print: pools, lenders (with
their entitlements), a user's run registration and Treasurer standing.
"""

from __future__ import annotations

from typing import Any

from solders.pubkey import Pubkey

from psyche.solana.errors import ChainError
from psyche.solana.programs.mining_pool.accounts import LenderState, PoolState
from psyche.solana.programs.mining_pool.addresses import (
    pool_collateral_pda,
    pool_pda,
    pool_redeemable_pda,
)
from psyche.solana.programs.mining_pool.reads import read_lender, read_pool
from psyche.solana.session import Session
from psyche.solana.tokens import associated_token_address

__all__ = [
    "dump_user",
    "lender_json",
    "pool_json",
    "run_registration_json",
    "treasurer_participant_json",
    "user_json",
]


def pool_json(pool: PoolState, program: Pubkey) -> dict[str, Any]:
    """A pool as the commands print it: its fields, its token accounts and what rounding left
    unclaimable so far (``total_deposited_redeemable − total_claimed_redeemable``)."""
    return {
        "index": pool.index,
        "address": str(pool.address),
        "authority": str(pool.authority),
        "collateral_mint": str(pool.collateral_mint),
        "redeemable_mint": str(pool.redeemable_mint),
        "pool_collateral": str(pool_collateral_pda(program, pool.address)),
        "pool_redeemable": str(pool_redeemable_pda(program, pool.address)),
        "max_deposit_collateral_amount": pool.max_deposit_collateral_amount,
        "total_deposited_collateral_amount": pool.total_deposited_collateral_amount,
        "total_extracted_collateral_amount": pool.total_extracted_collateral_amount,
        "total_deposited_redeemable_amount": pool.total_deposited_redeemable_amount,
        "total_claimed_redeemable_amount": pool.total_claimed_redeemable_amount,
        "unclaimed_redeemable_amount": (
            pool.total_deposited_redeemable_amount - pool.total_claimed_redeemable_amount
        ),
        "frozen": pool.frozen,
    }


def lender_json(lender: LenderState, pool: PoolState) -> dict[str, Any]:
    """A lender with its entitlement and what it can still claim, computed as the program does
    (claims open only once the pool is frozen; before, ``claimable`` is what it would be)."""
    return {
        "address": str(lender.address),
        "pool": str(lender.pool),
        "user": str(lender.user),
        "deposited_collateral_amount": lender.deposited_collateral_amount,
        "claimed_redeemable_amount": lender.claimed_redeemable_amount,
        "entitled_redeemable_amount": lender.entitled(pool),
        "claimable_redeemable_amount": lender.claimable(pool),
        "can_claim_now": pool.frozen and lender.claimable(pool) > 0,
    }


async def user_json(s: Session, user: Pubkey, indexes: list[int]) -> list[dict[str, Any]]:
    """``user`` in each pool of ``indexes``: the pool, the user's lender (or None) and the
    user's associated token account balances of the pool's two mints."""
    out = []
    pid = s.mining_pool.program_id
    for index in indexes:
        pool = await read_pool(s, index)
        if pool is None:
            out.append({"index": index, "address": str(pool_pda(pid, index)), "pool": None})
            continue
        lender = await read_lender(s, pool.address, user)
        balances = {}
        for role, mint in (
            ("collateral", pool.collateral_mint),
            ("redeemable", pool.redeemable_mint),
        ):
            ata = associated_token_address(user, mint)
            info = await s.token_account(ata)
            balances[role] = {
                "mint": str(mint),
                "token_account": str(ata),
                "amount": None if info is None else info.amount,
            }
        out.append(
            {
                "index": index,
                "address": str(pool.address),
                "pool": pool_json(pool, pid),
                "lender": None if lender is None else lender_json(lender, pool),
                "balances": balances,
            }
        )
    return out


async def run_registration_json(s: Session, run_id: str, user: Pubkey) -> dict[str, Any]:
    """``user``'s registration in run ``run_id``'s coordinator account: points earned and
    slashed (docs/protocol.md, "Rewards"), or ``registered: false``. Read from the raw account,
    so a run created but never configured answers too."""
    accounts = await s.run_accounts(run_id)
    data = await s.read(accounts.account)
    if data is None:
        raise ChainError(f"coordinator account {accounts.account} does not exist")
    raw = s.coordinator.idl.decode_account("CoordinatorAccount", data)
    cs = raw["state"]["clients_state"]
    me = bytes(user)
    entry = next(
        (c for c in cs["clients"][: cs["num_clients"]] if bytes(c["id"]["signer"]) == me), None
    )
    out: dict[str, Any] = {
        "run_id": run_id,
        "coordinator_instance": str(accounts.instance),
        "coordinator_account": str(accounts.account),
        "registered": entry is not None,
    }
    if entry is not None:
        out |= {
            "earned": entry["earned"],
            "slashed": entry["slashed"],
            "points": max(0, entry["earned"] - entry["slashed"]),
            "active": entry["active"],
        }
    return out


async def treasurer_participant_json(
    s: Session, run_id: str, user: Pubkey
) -> dict[str, Any] | None:
    """``user``'s standing with the Treasurer in run ``run_id`` (its ``Participant``: points
    claimed and still claimable, what they are worth; :func:`treasurer.rewards_json`), or None
    when the run was not created through the Treasurer."""
    from psyche.solana.programs import treasurer_commands as treasurer

    rewards = await treasurer.rewards_json(s, run_id, user)
    return None if rewards.get("treasurer") is None else rewards


async def dump_user(
    s: Session, user: Pubkey, run_id: str | None, indexes: list[int]
) -> dict[str, Any]:
    """What ``json-dump-user`` prints: ``user``'s lender state in each pool of ``indexes`` (with
    what it can claim) and, with ``run_id``, its coordinator registration and, for a run created
    through the Treasurer, its Treasurer participant (``run.treasurer``; None otherwise)."""
    out: dict[str, Any] = {"address": str(user), "pools": await user_json(s, user, indexes)}
    if run_id is not None:
        run = await run_registration_json(s, run_id, user)
        run["treasurer"] = await treasurer_participant_json(s, run_id, user)
        out["run"] = run
    return out
