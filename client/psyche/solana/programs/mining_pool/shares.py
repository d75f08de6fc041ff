"""The program's share arithmetic, pure integers: what a lender is owed of the pool's earnings."""

from __future__ import annotations

__all__ = [
    "U64_MAX",
    "claimable",
    "entitlement",
]


U64_MAX = 2**64 - 1


def entitlement(total_redeemable: int, deposited: int, total_deposited: int) -> int:
    """What a lender that deposited ``deposited`` of ``total_deposited`` is owed of
    ``total_redeemable``: ``floor(total_redeemable × deposited / total_deposited)`` (the
    program's u128 arithmetic; Python's integers are exact). 0 when nothing was deposited."""
    if total_deposited == 0:
        return 0
    return total_redeemable * deposited // total_deposited


def claimable(total_redeemable: int, deposited: int, total_deposited: int, claimed: int) -> int:
    """Entitlement minus what was already claimed (never negative)."""
    return max(0, entitlement(total_redeemable, deposited, total_deposited) - claimed)
