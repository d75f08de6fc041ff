"""Transaction fees as a validator charges them: 5000 lamports per required signature plus the
prioritization fee ``ceil(compute_unit_price · compute_unit_limit / 10⁶)``.

LiteSVM 0.6 charges only the signature part, so :class:`~psyche.localsvm.chain.Chain` charges the
prioritization part itself and uses this module for both, and ``getFeeForMessage`` answers from
it.
"""

from __future__ import annotations

from solders.compute_budget import ID as COMPUTE_BUDGET_ID
from solders.message import Message, MessageV0

__all__ = ["LAMPORTS_PER_SIGNATURE", "FeeDetails", "fee_details"]

LAMPORTS_PER_SIGNATURE = 5000
DEFAULT_UNITS_PER_INSTRUCTION = 200_000
MAX_COMPUTE_UNIT_LIMIT = 1_400_000
MICRO_LAMPORTS_PER_LAMPORT = 1_000_000
SET_COMPUTE_UNIT_LIMIT = 2
SET_COMPUTE_UNIT_PRICE = 3


class FeeDetails:
    __slots__ = ("base", "prioritization")

    def __init__(self, base: int, prioritization: int) -> None:
        self.base = base
        self.prioritization = prioritization

    @property
    def total(self) -> int:
        return self.base + self.prioritization


def fee_details(msg: Message | MessageV0) -> FeeDetails:
    keys = msg.account_keys
    price, limit, others = 0, None, 0
    for ix in msg.instructions:
        data = bytes(ix.data)
        if keys[ix.program_id_index] != COMPUTE_BUDGET_ID:
            others += 1
        elif data[:1] == bytes([SET_COMPUTE_UNIT_PRICE]) and len(data) == 9:
            price = int.from_bytes(data[1:9], "little")
        elif data[:1] == bytes([SET_COMPUTE_UNIT_LIMIT]) and len(data) == 5:
            limit = int.from_bytes(data[1:5], "little")
    units = limit if limit is not None else DEFAULT_UNITS_PER_INSTRUCTION * others
    units = min(units, MAX_COMPUTE_UNIT_LIMIT)
    priority = -(-price * units // MICRO_LAMPORTS_PER_LAMPORT)
    base = LAMPORTS_PER_SIGNATURE * msg.header.num_required_signatures
    return FeeDetails(base, priority)
