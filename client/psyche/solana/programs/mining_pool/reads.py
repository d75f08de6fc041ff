"""Reading the Mining Pool's accounts through a session (None where there is no account)."""

from __future__ import annotations

from solders.pubkey import Pubkey

from psyche.solana.programs.mining_pool.accounts import LenderState, PoolState
from psyche.solana.programs.mining_pool.addresses import lender_pda, pool_pda
from psyche.solana.session import Session

__all__ = ["read_lender", "read_pool"]


async def read_pool(s: Session, index: int) -> PoolState | None:
    address = pool_pda(s.mining_pool.program_id, index)
    data = await s.read(address)
    return None if data is None else PoolState.decode(s.mining_pool, address, data)


async def read_lender(s: Session, pool: Pubkey, user: Pubkey) -> LenderState | None:
    address = lender_pda(s.mining_pool.program_id, pool, user)
    data = await s.read(address)
    return None if data is None else LenderState.decode(s.mining_pool, address, data)
