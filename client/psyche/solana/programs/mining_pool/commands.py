"""One coroutine per ``mining-pool-*`` command, taking a
:class:`~psyche.solana.session.Session`: read the pool, refuse what the program
would, send, and answer with the pool and lender after.
"""

from __future__ import annotations

from typing import Any

from solders.instruction import Instruction
from solders.pubkey import Pubkey

from psyche.solana.errors import ChainError
from psyche.solana.programs.mining_pool.accounts import PoolState
from psyche.solana.programs.mining_pool.addresses import pool_collateral_pda, pool_pda
from psyche.solana.programs.mining_pool.instructions import MiningPoolInstructions
from psyche.solana.programs.mining_pool.reads import read_lender, read_pool
from psyche.solana.programs.mining_pool.refusals import (
    claim_refusal,
    deposit_refusal,
    extract_refusal,
    redeemable_deposit_refusal,
    refuse,
    update_refusal,
)
from psyche.solana.programs.mining_pool.shares import U64_MAX
from psyche.solana.programs.mining_pool.views import lender_json, pool_json
from psyche.solana.session import Session
from psyche.solana.tokens import associated_token_address, create_associated_account_ix

__all__ = [
    "claim",
    "deposit",
    "pool_create",
    "pool_update",
    "redeemable_deposit",
    "withdraw",
]


async def _pool(s: Session, index: int) -> PoolState:
    pool = await read_pool(s, index)
    if pool is None:
        where = pool_pda(s.mining_pool.program_id, index)
        raise ChainError(f"mining pool {index} does not exist (no account at {where})")
    return pool


def _check_authority(s: Session, pool: PoolState, what: str) -> None:
    me = s.wallet.pubkey()
    if me != pool.authority:
        raise ChainError(
            f"only mining pool {pool.index}'s authority {pool.authority} may {what}; "
            f"the wallet is {me}"
        )


def _check_amount(amount: int, what: str) -> None:
    if not 1 <= amount <= U64_MAX:
        raise ChainError(f"{what} must be 1..{U64_MAX} base units, not {amount}")


async def _balance(s: Session, account: Pubkey) -> int:
    info = await s.token_account(account)
    return 0 if info is None else info.amount


def _ixs(s: Session) -> MiningPoolInstructions:
    return MiningPoolInstructions(s.mining_pool)


async def _send(s: Session, ixs: list[Instruction], label: str) -> str:
    # The sender prepends the compute-unit limit (budget.py, compute_units.json).
    return await s.sender(s.mining_pool).send(ixs, label=label)


async def pool_create(
    s: Session, index: int, collateral_mint: Pubkey, redeemable_mint: Pubkey, max_deposit: int
) -> dict[str, Any]:
    """Create pool ``index`` with the wallet as payer and authority."""
    if not 0 <= index <= U64_MAX:
        raise ChainError(f"the pool index must be 0..{U64_MAX}, not {index}")
    if not 0 <= max_deposit <= U64_MAX:
        raise ChainError(f"the maximum deposit must be 0..{U64_MAX}, not {max_deposit}")
    existing = await read_pool(s, index)
    if existing is not None:
        raise ChainError(
            f"mining pool {index} already exists at {existing.address} "
            f"(authority {existing.authority})"
        )
    for role, mint in (("collateral", collateral_mint), ("redeemable", redeemable_mint)):
        try:
            await s.mint(mint)
        except ChainError as e:
            raise ChainError(f"{role} mint {mint}: {e}") from None
    me = s.wallet.pubkey()
    ix = _ixs(s).pool_create(me, me, index, collateral_mint, redeemable_mint, max_deposit)
    sig = await _send(s, [ix], "mining-pool-create")
    return {"pool": pool_json(await _pool(s, index), s.mining_pool.program_id), "signature": sig}


async def pool_update(
    s: Session, index: int, max_deposit: int | None = None, freeze: bool | None = None
) -> dict[str, Any]:
    """Set the cap and/or freeze (one-way) pool ``index``; the wallet must be its authority."""
    if max_deposit is None and freeze is None:
        raise ChainError("nothing to update: give a new maximum deposit or freeze")
    pool = await _pool(s, index)
    _check_authority(s, pool, "update it")
    if max_deposit is not None and not 0 <= max_deposit <= U64_MAX:
        raise ChainError(f"the maximum deposit must be 0..{U64_MAX}, not {max_deposit}")
    refuse(update_refusal(pool, max_deposit, freeze))
    ix = _ixs(s).pool_update(s.wallet.pubkey(), index, max_deposit, freeze)
    sig = await _send(s, [ix], "mining-pool-update")
    return {"pool": pool_json(await _pool(s, index), s.mining_pool.program_id), "signature": sig}


async def deposit(s: Session, index: int, amount: int) -> dict[str, Any]:
    """Deposit ``amount`` collateral from the wallet's associated token account (creating the
    wallet's ``Lender`` first if it has none)."""
    _check_amount(amount, "the deposit")
    pool = await _pool(s, index)
    refuse(deposit_refusal(pool, amount))
    me = s.wallet.pubkey()
    source = associated_token_address(me, pool.collateral_mint)
    held = await _balance(s, source)
    if held < amount:
        raise ChainError(
            f"the wallet's collateral account {source} holds {held} of mint "
            f"{pool.collateral_mint}, less than the {amount} to deposit"
        )
    ixs = _ixs(s)
    out: list[Instruction] = []
    if await read_lender(s, pool.address, me) is None:
        out.append(ixs.lender_create(me, me, index))
    out.append(ixs.lender_deposit(me, index, source, amount))
    sig = await _send(s, out, "mining-pool-deposit")
    return await _after(s, index, me, sig)


async def withdraw(s: Session, index: int, amount: int) -> dict[str, Any]:
    """The authority takes ``amount`` collateral out of the pool (``pool_extract``) into its
    associated token account (created if missing)."""
    _check_amount(amount, "the withdrawal")
    pool = await _pool(s, index)
    _check_authority(s, pool, "withdraw its collateral")
    pid = s.mining_pool.program_id
    refuse(extract_refusal(pool, await _balance(s, pool_collateral_pda(pid, pool.address)), amount))
    me = s.wallet.pubkey()
    dest = associated_token_address(me, pool.collateral_mint)
    ixs = [
        create_associated_account_ix(me, me, pool.collateral_mint),
        _ixs(s).pool_extract(me, index, dest, amount),
    ]
    sig = await _send(s, ixs, "mining-pool-withdraw")
    return {"pool": pool_json(await _pool(s, index), pid), "to": str(dest), "signature": sig}


async def redeemable_deposit(s: Session, index: int, amount: int) -> dict[str, Any]:
    """The authority deposits ``amount`` of earnings (redeemable tokens) from its associated
    token account into the frozen pool."""
    _check_amount(amount, "the redeemable deposit")
    pool = await _pool(s, index)
    _check_authority(s, pool, "deposit its earnings")
    refuse(redeemable_deposit_refusal(pool))
    me = s.wallet.pubkey()
    source = associated_token_address(me, pool.redeemable_mint)
    held = await _balance(s, source)
    if held < amount:
        raise ChainError(
            f"the wallet's redeemable account {source} holds {held} of mint "
            f"{pool.redeemable_mint}, less than the {amount} to deposit"
        )
    ix = _ixs(s).pool_redeemable_deposit(me, index, source, amount)
    sig = await _send(s, [ix], "mining-pool-redeemable-deposit")
    pid = s.mining_pool.program_id
    return {"pool": pool_json(await _pool(s, index), pid), "signature": sig}


async def claim(s: Session, index: int, amount: int | None = None) -> dict[str, Any]:
    """The wallet claims ``amount`` (default: all it can) of its share of the pool's earnings
    into its associated token account of the redeemable mint (created if missing)."""
    if amount is not None:
        _check_amount(amount, "the claim")
    pool = await _pool(s, index)
    me = s.wallet.pubkey()
    lender = await read_lender(s, pool.address, me)
    if lender is None:
        raise ChainError(f"{me} never deposited in mining pool {index}: nothing to claim")
    refuse(claim_refusal(pool, lender, amount))
    if amount is None:
        amount = lender.claimable(pool)
    dest = associated_token_address(me, pool.redeemable_mint)
    ixs = [
        create_associated_account_ix(me, me, pool.redeemable_mint),
        _ixs(s).lender_claim(me, index, dest, amount),
    ]
    sig = await _send(s, ixs, "mining-pool-claim")
    out = await _after(s, index, me, sig)
    out["claimed"] = amount
    out["to"] = str(dest)
    return out


async def _after(s: Session, index: int, user: Pubkey, sig: str) -> dict[str, Any]:
    pool = await _pool(s, index)
    lender = await read_lender(s, pool.address, user)
    return {
        "pool": pool_json(pool, s.mining_pool.program_id),
        "lender": None if lender is None else lender_json(lender, pool),
        "signature": sig,
    }
