"""The compute-unit limit each transaction requests.

A transaction without a ``SetComputeUnitLimit`` instruction gets 200,000 compute units per
instruction, which is wrong both ways: the coordinator's heaviest instructions at a full client
list need more (a validator would abort them), and asking for far more than is used makes a
transaction less attractive to schedule. So every transaction the client sends asks for what its
instructions need at their worst case: the limits in ``compute_units.json``, measured on the SBF
build by ``programs/psyche-coordinator/tests/program_costs.rs`` (which runs each instruction at
its worst case *with* these limits, and asserts at most 80 % of each is used; the table and its
command are in bench/README.md).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.instruction import Instruction
from solders.pubkey import Pubkey

from psyche.solana.idl import IdlError
from psyche.solana.instructions import ProgramClient
from psyche.solana.tokens import ASSOCIATED_TOKEN_PROGRAM_ID

__all__ = ["ASSOCIATED_TOKEN_UNITS", "MAX_TX_COMPUTE_UNITS", "ComputeBudget", "load_limits"]

MAX_TX_COMPUTE_UNITS = 1_400_000
"""Solana's per-transaction cap."""
OTHER_INSTRUCTION_UNITS = 20_000
"""Budget for an instruction of a program without a table (the authorizer, the system program):
each of theirs costs a few thousand units."""
ASSOCIATED_TOKEN_UNITS = 40_000
"""Creating an associated token account (the ATA program calls the system and token programs):
about 28,000 units measured on the local SVM, so the default above is too little."""
LIMITS_FILE = Path(__file__).with_name("compute_units.json")
COMPUTE_BUDGET_PROGRAM = Pubkey.from_string("ComputeBudget111111111111111111111111111111")


@functools.cache
def load_limits(path: Path = LIMITS_FILE) -> Mapping[str, int]:
    """Instruction name → compute units it may use at its worst case (read once per file: every
    session's sender uses it)."""
    limits = json.loads(path.read_text())["limits"]
    return {str(k): int(v) for k, v in limits.items()}


class ComputeBudget:
    """Prepends the compute-unit limit a list of instructions needs, and the compute-unit price
    (the priority fee, in micro-lamports per unit) when one is set: on a busy cluster a
    transaction without one waits behind those that pay."""

    def __init__(
        self,
        programs: Iterable[ProgramClient],
        limits: Mapping[str, int] | None = None,
        *,
        price: int = 0,
    ) -> None:
        if price < 0:
            raise ValueError("the compute-unit price is a number of micro-lamports, >= 0")
        self.price = price
        table = load_limits() if limits is None else limits
        self._by_program: dict[Pubkey, list[tuple[bytes, int]]] = {}
        for p in programs:
            rows = []
            for name in table:
                try:
                    rows.append((p.idl.instruction(name).discriminator, table[name]))
                except IdlError:  # an instruction of another program
                    continue
            self._by_program[p.program_id] = rows

    def units(self, ixs: Sequence[Instruction]) -> int:
        total = 0
        for ix in ixs:
            total += self._units_of(ix)
        return min(total, MAX_TX_COMPUTE_UNITS)

    def _units_of(self, ix: Instruction) -> int:
        for disc, units in self._by_program.get(ix.program_id, []):
            if bytes(ix.data[: len(disc)]) == disc:
                return units
        if ix.program_id == ASSOCIATED_TOKEN_PROGRAM_ID:
            return ASSOCIATED_TOKEN_UNITS
        return OTHER_INSTRUCTION_UNITS

    def __call__(self, ixs: Sequence[Instruction]) -> list[Instruction]:
        """``ixs`` with a ``SetComputeUnitLimit`` (and ``SetComputeUnitPrice`` with a price)
        first, unless they already carry compute-budget instructions."""
        if any(ix.program_id == COMPUTE_BUDGET_PROGRAM for ix in ixs):
            return list(ixs)
        head = [set_compute_unit_limit(self.units(ixs))]
        if self.price:
            head.append(set_compute_unit_price(self.price))
        return [*head, *ixs]
