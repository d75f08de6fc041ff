"""The Mining Pool's ``Pool`` and ``Lender`` accounts, decoded from the IDL."""

from __future__ import annotations

from dataclasses import dataclass

from solders.pubkey import Pubkey

from psyche.solana.instructions import ProgramClient
from psyche.solana.programs.mining_pool.shares import claimable, entitlement

__all__ = ["LenderState", "PoolState"]


@dataclass(frozen=True, slots=True)
class PoolState:
    """A decoded ``Pool`` account (docs/rewards.md, "Mining Pool", "Accounts")."""

    address: Pubkey
    bump: int
    index: int
    authority: Pubkey
    collateral_mint: Pubkey
    redeemable_mint: Pubkey
    max_deposit_collateral_amount: int
    total_deposited_collateral_amount: int
    total_extracted_collateral_amount: int
    total_deposited_redeemable_amount: int
    total_claimed_redeemable_amount: int
    frozen: bool

    @classmethod
    def decode(cls, program: ProgramClient, address: Pubkey, data: bytes) -> PoolState:
        v = program.idl.decode_account("Pool", data)
        return cls(
            address=address,
            bump=v["bump"],
            index=v["index"],
            authority=Pubkey.from_bytes(bytes(v["authority"])),
            collateral_mint=Pubkey.from_bytes(bytes(v["collateral_mint"])),
            redeemable_mint=Pubkey.from_bytes(bytes(v["redeemable_mint"])),
            max_deposit_collateral_amount=v["max_deposit_collateral_amount"],
            total_deposited_collateral_amount=v["total_deposited_collateral_amount"],
            total_extracted_collateral_amount=v["total_extracted_collateral_amount"],
            total_deposited_redeemable_amount=v["total_deposited_redeemable_amount"],
            total_claimed_redeemable_amount=v["total_claimed_redeemable_amount"],
            frozen=bool(v["frozen"]),
        )

    @property
    def room(self) -> int:
        """Collateral that can still be deposited before the cap."""
        return max(0, self.max_deposit_collateral_amount - self.total_deposited_collateral_amount)


@dataclass(frozen=True, slots=True)
class LenderState:
    """A decoded ``Lender`` account."""

    address: Pubkey
    bump: int
    pool: Pubkey
    user: Pubkey
    deposited_collateral_amount: int
    claimed_redeemable_amount: int

    @classmethod
    def decode(cls, program: ProgramClient, address: Pubkey, data: bytes) -> LenderState:
        v = program.idl.decode_account("Lender", data)
        return cls(
            address=address,
            bump=v["bump"],
            pool=Pubkey.from_bytes(bytes(v["pool"])),
            user=Pubkey.from_bytes(bytes(v["user"])),
            deposited_collateral_amount=v["deposited_collateral_amount"],
            claimed_redeemable_amount=v["claimed_redeemable_amount"],
        )

    def entitled(self, pool: PoolState) -> int:
        return entitlement(
            pool.total_deposited_redeemable_amount,
            self.deposited_collateral_amount,
            pool.total_deposited_collateral_amount,
        )

    def claimable(self, pool: PoolState) -> int:
        return claimable(
            pool.total_deposited_redeemable_amount,
            self.deposited_collateral_amount,
            pool.total_deposited_collateral_amount,
            self.claimed_redeemable_amount,
        )
