"""The Mining Pool program's client (docs/rewards.md, "Mining Pool"): what the
``psyche-solana-client mining-pool-*`` commands do. Lenders deposit collateral into a pool; the
pool's authority withdraws it to buy compute, freezes the pool, deposits what it earned (the
redeemable token), and each lender claims
``floor(total_redeemable × deposited / total_deposited) − claimed``.

:class:`MiningPoolInstructions` builds each instruction from the IDL (``ProgramClient.build``)
with every account spelled out, so the cross-language vectors rebuild them with the same code;
the coroutines (one per command, taking a :class:`~psyche.solana.session.Session`) read the pool
first and refuse, with the numbers, what the program would refuse (a frozen pool, a cap, nothing
to claim), then send. The wallet's own token accounts are its associated token accounts (created
idempotently where it receives tokens).

The client follows its concerns, one module each. Without a session: :mod:`.addresses` (PDAs),
:mod:`.shares` (the program's share arithmetic), :mod:`.accounts` (``Pool`` and ``Lender``),
:mod:`.instructions` (the builders, bytes and account order from the IDL) and :mod:`.refusals`
(the program's rules, pure). With one: :mod:`.reads`, :mod:`.commands` and :mod:`.views` (the
JSON printed). The package re-exports every name the commands use.
"""

from __future__ import annotations

from psyche.solana.programs.mining_pool.accounts import LenderState, PoolState
from psyche.solana.programs.mining_pool.addresses import (
    LENDER_SEED,
    POOL_COLLATERAL_SEED,
    POOL_REDEEMABLE_SEED,
    POOL_SEED,
    lender_pda,
    pool_collateral_pda,
    pool_pda,
    pool_redeemable_pda,
)
from psyche.solana.programs.mining_pool.commands import (
    claim,
    deposit,
    pool_create,
    pool_update,
    redeemable_deposit,
    withdraw,
)
from psyche.solana.programs.mining_pool.instructions import MiningPoolInstructions
from psyche.solana.programs.mining_pool.reads import read_lender, read_pool
from psyche.solana.programs.mining_pool.refusals import (
    PoolRefusal,
    claim_refusal,
    deposit_refusal,
    extract_refusal,
    redeemable_deposit_refusal,
    update_refusal,
)
from psyche.solana.programs.mining_pool.shares import U64_MAX, claimable, entitlement
from psyche.solana.programs.mining_pool.views import (
    dump_user,
    lender_json,
    pool_json,
    run_registration_json,
    treasurer_participant_json,
    user_json,
)

__all__ = [
    "LENDER_SEED",
    "POOL_COLLATERAL_SEED",
    "POOL_REDEEMABLE_SEED",
    "POOL_SEED",
    "U64_MAX",
    "LenderState",
    "MiningPoolInstructions",
    "PoolRefusal",
    "PoolState",
    "claim",
    "claim_refusal",
    "claimable",
    "deposit",
    "deposit_refusal",
    "dump_user",
    "entitlement",
    "extract_refusal",
    "lender_json",
    "lender_pda",
    "pool_collateral_pda",
    "pool_create",
    "pool_json",
    "pool_pda",
    "pool_redeemable_pda",
    "pool_update",
    "read_lender",
    "read_pool",
    "redeemable_deposit",
    "redeemable_deposit_refusal",
    "run_registration_json",
    "treasurer_participant_json",
    "update_refusal",
    "user_json",
    "withdraw",
]
