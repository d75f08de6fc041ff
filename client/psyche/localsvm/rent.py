"""The runtime's rent-state rule, which LiteSVM 0.6 (solders 0.26) does not apply.

A validator refuses a transaction that leaves a writable account neither empty nor rent-exempt,
unless it already was rent-paying with the same size and loses lamports only
(``InsufficientFundsForRent { account_index }``); the fee payer is checked the same way for
the fee alone before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

__all__ = ["RentKind", "RentState", "rent_state", "transition_allowed"]


class RentKind(Enum):
    UNINITIALIZED = "uninitialized"
    RENT_PAYING = "rent-paying"
    RENT_EXEMPT = "rent-exempt"


@dataclass(frozen=True, slots=True)
class RentState:
    kind: RentKind
    lamports: int = 0
    size: int = 0


def rent_state(lamports: int, size: int, minimum: Callable[[int], int]) -> RentState:
    if lamports == 0:
        return RentState(RentKind.UNINITIALIZED)
    if lamports >= minimum(size):
        return RentState(RentKind.RENT_EXEMPT)
    return RentState(RentKind.RENT_PAYING, lamports, size)


def transition_allowed(pre: RentState, post: RentState) -> bool:
    if post.kind is not RentKind.RENT_PAYING:
        return True
    if pre.kind is not RentKind.RENT_PAYING:
        return False
    return post.size == pre.size and post.lamports <= pre.lamports
