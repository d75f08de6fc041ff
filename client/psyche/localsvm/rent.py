"""The runtime's rent-state rule, which LiteSVM 0.6 (solders 0.26) does not apply.

A validator refuses a transaction that leaves a writable account neither empty nor rent-exempt,
unless it already was rent-paying with the same size and loses lamports only
(``InsufficientFundsForRent { account_index }``); the fee payer is checked the same way for
the fee alone before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from solders.account import Account
from solders.message import Message, MessageV0
from solders.pubkey import Pubkey

from psyche.localsvm.fees import FeeDetails

__all__ = ["RentKind", "RentState", "rent_state", "rent_violation", "transition_allowed"]

INCINERATOR = Pubkey.from_string("1nc1nerator11111111111111111111111111111111")


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


def writable_indexes(msg: Message | MessageV0) -> list[int]:
    """Indexes of the static account keys the header marks writable."""
    h = msg.header
    n, signed = len(msg.account_keys), h.num_required_signatures
    out = []
    for i in range(n):
        if i < signed:
            if i < signed - h.num_readonly_signed_accounts:
                out.append(i)
        elif i - signed < n - signed - h.num_readonly_unsigned_accounts:
            out.append(i)
    return out


def rent_violation(
    msg: Message | MessageV0,
    pre: Mapping[Pubkey, Account | None],
    post: Mapping[Pubkey, Account],
    fee: FeeDetails,
    minimum: Callable[[int], int],
) -> int | None:
    """The index of the first writable account the transaction (``pre`` → ``post``) leaves in a
    rent state the runtime refuses, or None; ``minimum`` is the rent-exempt balance for a size."""
    keys = msg.account_keys
    for i in writable_indexes(msg):
        key = keys[i]
        if key == INCINERATOR:
            continue
        before = pre.get(key)
        after = post.get(key, before)
        pre_lamports = before.lamports if before is not None else 0
        post_lamports = after.lamports if after is not None else 0
        if i == 0:
            # The payer's state before execution is after its fee; LiteSVM's post-state
            # carries the signature fee but not the prioritization fee.
            pre_lamports -= fee.total
            post_lamports -= fee.prioritization
        pre_state = rent_state(
            pre_lamports,
            len(bytes(before.data)) if before is not None else 0,
            minimum,
        )
        post_state = rent_state(
            post_lamports,
            len(bytes(after.data)) if after is not None else 0,
            minimum,
        )
        if not transition_allowed(pre_state, post_state):
            return i
    return None
