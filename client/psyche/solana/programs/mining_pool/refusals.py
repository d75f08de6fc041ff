"""What the program would refuse, said before sending, in the program's order and with the
numbers: each rule is pure (a pool's and a lender's state in, a refusal or None out).
"""

from __future__ import annotations

from psyche.solana.errors import ChainError
from psyche.solana.programs.mining_pool.accounts import LenderState, PoolState

__all__ = [
    "PoolRefusal",
    "claim_refusal",
    "deposit_refusal",
    "extract_refusal",
    "redeemable_deposit_refusal",
    "refuse",
    "update_refusal",
]


class PoolRefusal(ChainError):
    """What the client refuses before sending, because the program would: ``error`` is the
    program error (IDL name) the transaction would fail with; the message says the numbers."""

    def __init__(self, error: str, message: str) -> None:
        self.error = error
        super().__init__(message)


def update_refusal(
    pool: PoolState, max_deposit: int | None, freeze: bool | None
) -> PoolRefusal | None:
    """``pool_update``'s checks, in the program's order (the cap against the state before the
    update, then the freeze)."""
    if max_deposit is not None:
        if pool.frozen:
            return PoolRefusal(
                "PoolFrozen",
                f"mining pool {pool.index} is frozen: its cap stays "
                f"{pool.max_deposit_collateral_amount}",
            )
        if max_deposit < pool.total_deposited_collateral_amount:
            return PoolRefusal(
                "PoolCapBelowDeposits",
                f"mining pool {pool.index}: a cap of {max_deposit} is below the "
                f"{pool.total_deposited_collateral_amount} already deposited",
            )
    if freeze is False and pool.frozen:
        return PoolRefusal(
            "PoolUnfreezeRefused", f"mining pool {pool.index} is frozen, and freezing is one-way"
        )
    return None


def deposit_refusal(pool: PoolState, amount: int) -> PoolRefusal | None:
    """``lender_deposit``'s checks: unfrozen pools only, the total within the cap."""
    if pool.frozen:
        return PoolRefusal(
            "PoolFrozen",
            f"mining pool {pool.index} is frozen: deposits are closed "
            f"({pool.total_deposited_collateral_amount} deposited in all)",
        )
    if amount > pool.room:
        return PoolRefusal(
            "PoolCapExceeded",
            f"mining pool {pool.index}: depositing {amount} would exceed the cap of "
            f"{pool.max_deposit_collateral_amount} ({pool.total_deposited_collateral_amount} "
            f"deposited, {pool.room} left)",
        )
    return None


def extract_refusal(pool: PoolState, held: int, amount: int) -> PoolRefusal | None:
    """``pool_extract``: at most what the pool's collateral account ``held``."""
    if amount > held:
        return PoolRefusal(
            "ExtractExceedsCollateral",
            f"mining pool {pool.index}'s collateral account holds {held}, less than the "
            f"{amount} to withdraw",
        )
    return None


def redeemable_deposit_refusal(pool: PoolState) -> PoolRefusal | None:
    """``pool_redeemable_deposit``: frozen pools only."""
    if not pool.frozen:
        return PoolRefusal(
            "PoolNotFrozen",
            f"mining pool {pool.index} is not frozen: freeze it first (mining-pool-update "
            "--freeze), so every share is fixed before earnings arrive",
        )
    return None


def claim_refusal(pool: PoolState, lender: LenderState, amount: int | None) -> PoolRefusal | None:
    """``lender_claim``: frozen pools only, ``amount`` (None: all that is left) within
    1..=claimable."""
    if not pool.frozen:
        return PoolRefusal(
            "PoolNotFrozen",
            f"mining pool {pool.index} is not frozen yet: claims open once its authority "
            "freezes it",
        )
    left = lender.claimable(pool)
    numbers = (
        f"{lender.deposited_collateral_amount} of {pool.total_deposited_collateral_amount} "
        f"deposited entitles to {lender.entitled(pool)} of the "
        f"{pool.total_deposited_redeemable_amount} redeemable, "
        f"{lender.claimed_redeemable_amount} already claimed"
    )
    if left == 0:
        return PoolRefusal(
            "ClaimExceedsShare", f"nothing claimable in mining pool {pool.index}: {numbers}"
        )
    if amount is not None and amount > left:
        return PoolRefusal(
            "ClaimExceedsShare",
            f"mining pool {pool.index}: {amount} is more than the {left} claimable ({numbers})",
        )
    return None


def refuse(refusal: PoolRefusal | None) -> None:
    if refusal is not None:
        raise refusal
