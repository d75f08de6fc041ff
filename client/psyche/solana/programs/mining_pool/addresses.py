"""The Mining Pool's account addresses: the seeds of its PDAs (docs/rewards.md, "Mining Pool")."""

from __future__ import annotations

import struct

from solders.pubkey import Pubkey

__all__ = [
    "LENDER_SEED",
    "POOL_COLLATERAL_SEED",
    "POOL_REDEEMABLE_SEED",
    "POOL_SEED",
    "lender_pda",
    "pool_collateral_pda",
    "pool_pda",
    "pool_redeemable_pda",
]


POOL_SEED = b"Pool"
POOL_COLLATERAL_SEED = b"PoolCollateral"
POOL_REDEEMABLE_SEED = b"PoolRedeemable"
LENDER_SEED = b"Lender"


def pool_pda(program: Pubkey, index: int) -> Pubkey:
    """The ``Pool`` of ``index``: ``["Pool", index: u64 LE]``."""
    return Pubkey.find_program_address([POOL_SEED, struct.pack("<Q", index)], program)[0]


def pool_collateral_pda(program: Pubkey, pool: Pubkey) -> Pubkey:
    """The pool's collateral token account: ``["PoolCollateral", pool]``."""
    return Pubkey.find_program_address([POOL_COLLATERAL_SEED, bytes(pool)], program)[0]


def pool_redeemable_pda(program: Pubkey, pool: Pubkey) -> Pubkey:
    """The pool's redeemable token account: ``["PoolRedeemable", pool]``."""
    return Pubkey.find_program_address([POOL_REDEEMABLE_SEED, bytes(pool)], program)[0]


def lender_pda(program: Pubkey, pool: Pubkey, user: Pubkey) -> Pubkey:
    """``user``'s ``Lender`` in ``pool``: ``["Lender", pool, user]``."""
    return Pubkey.find_program_address([LENDER_SEED, bytes(pool), bytes(user)], program)[0]
