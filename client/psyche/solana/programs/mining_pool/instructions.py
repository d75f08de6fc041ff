"""The Mining Pool's instruction builders: the bytes and account order come from the IDL, so
the cross-language vectors rebuild each one with this code.
"""

from __future__ import annotations

from solders.instruction import Instruction
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_PROGRAM_ID

from psyche.solana.instructions import ProgramClient
from psyche.solana.programs.mining_pool.addresses import (
    lender_pda,
    pool_collateral_pda,
    pool_pda,
    pool_redeemable_pda,
)

__all__ = [
    "MiningPoolInstructions",
]


class MiningPoolInstructions:
    """The Mining Pool's instructions, every account given (docs/rewards.md lists them); the
    bytes and account order come from the IDL."""

    def __init__(self, program: ProgramClient) -> None:
        self.p = program

    @property
    def program_id(self) -> Pubkey:
        return self.p.program_id

    def pool(self, index: int) -> Pubkey:
        return pool_pda(self.program_id, index)

    def _pool_accounts(self, index: int) -> dict[str, Pubkey]:
        pool = self.pool(index)
        return {
            "pool": pool,
            "pool_collateral": pool_collateral_pda(self.program_id, pool),
            "pool_redeemable": pool_redeemable_pda(self.program_id, pool),
            "token_program": TOKEN_PROGRAM_ID,
        }

    def pool_create(
        self,
        payer: Pubkey,
        authority: Pubkey,
        index: int,
        collateral_mint: Pubkey,
        redeemable_mint: Pubkey,
        max_deposit: int,
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "payer": payer,
            "authority": authority,
            "collateral_mint": collateral_mint,
            "redeemable_mint": redeemable_mint,
        }
        args = {"index": index, "max_deposit_collateral_amount": max_deposit}
        return self.p.build("pool_create", args, accounts)

    def pool_update(
        self, authority: Pubkey, index: int, max_deposit: int | None, freeze: bool | None
    ) -> Instruction:
        args = {"max_deposit_collateral_amount": max_deposit, "freeze": freeze}
        return self.p.build("pool_update", args, {"authority": authority, "pool": self.pool(index)})

    def pool_extract(
        self, authority: Pubkey, index: int, authority_collateral: Pubkey, amount: int
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "authority": authority,
            "authority_collateral": authority_collateral,
        }
        return self.p.build("pool_extract", {"collateral_amount": amount}, accounts)

    def pool_redeemable_deposit(
        self, authority: Pubkey, index: int, authority_redeemable: Pubkey, amount: int
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "authority": authority,
            "authority_redeemable": authority_redeemable,
        }
        return self.p.build("pool_redeemable_deposit", {"redeemable_amount": amount}, accounts)

    def lender(self, index: int, user: Pubkey) -> Pubkey:
        return lender_pda(self.program_id, self.pool(index), user)

    def lender_create(self, payer: Pubkey, user: Pubkey, index: int) -> Instruction:
        accounts = {
            "payer": payer,
            "user": user,
            "pool": self.pool(index),
            "lender": self.lender(index, user),
        }
        return self.p.build("lender_create", {}, accounts)

    def lender_deposit(
        self, user: Pubkey, index: int, user_collateral: Pubkey, amount: int
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "user": user,
            "user_collateral": user_collateral,
            "lender": self.lender(index, user),
        }
        return self.p.build("lender_deposit", {"collateral_amount": amount}, accounts)

    def lender_claim(
        self, user: Pubkey, index: int, user_redeemable: Pubkey, amount: int
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "user": user,
            "user_redeemable": user_redeemable,
            "lender": self.lender(index, user),
        }
        return self.p.build("lender_claim", {"redeemable_amount": amount}, accounts)
