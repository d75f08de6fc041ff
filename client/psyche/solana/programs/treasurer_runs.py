"""Which run is the Treasurer's, and the checks every Treasurer command shares.

* :func:`treasurer_run` tells whether a run is the Treasurer's: its coordinator's
  ``main_authority`` is an account owned by the Treasurer that decodes as a ``Run`` of this very
  coordinator instance (:mod:`psyche.solana.programs.coordinator_commands` routes the owner's
  commands through ``run_update`` when it is); :func:`require_run` refuses a run that is not.
* :func:`run_pda` and :func:`as_u64` refuse a number the program's u64 cannot hold with a
  ``ChainError``, which the commands report with their exit code.

The commands themselves are :mod:`psyche.solana.programs.treasurer_commands`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from solders.pubkey import Pubkey

from psyche.solana.errors import ChainError
from psyche.solana.idl import IdlError
from psyche.solana.instructions import instance_pda
from psyche.solana.programs import treasurer as programs_treasurer
from psyche.solana.programs.treasurer import U64_MAX, TreasurerRun
from psyche.solana.session import Session

__all__ = ["as_u64", "require_run", "run_pda", "treasurer_run"]


def as_u64(value: int) -> int:
    """``value``, refused unless it is a u64."""
    if not 0 <= value <= U64_MAX:
        raise ChainError(f"{value} is not a u64")
    return value


def run_pda(program: Pubkey, index: int) -> Pubkey:
    """:func:`psyche.solana.programs.treasurer.run_pda`, refusing a non-u64 index as every
    Treasurer command does (a ``ChainError``, which the commands report with their exit code)."""
    return programs_treasurer.run_pda(program, as_u64(index))


async def treasurer_run(
    s: Session, run_id: str, instance: Mapping[str, Any] | None = None
) -> TreasurerRun | None:
    """The Treasurer's ``Run`` that owns ``run_id``'s coordinator, or None when the run's
    ``main_authority`` is not one (a wallet, as for a run made by plain ``create-run``).
    ``instance``: the decoded ``CoordinatorInstance`` if the caller has read it already."""
    inst = instance if instance is not None else await s.instance(run_id)
    authority = Pubkey.from_bytes(bytes(inst["main_authority"]))
    if authority.is_on_curve():
        return None  # a wallet's key: PDAs are off the curve
    found = await s.read_with_owner(authority)
    if found is None or found[0] != s.treasurer.program_id:
        return None
    try:
        run = TreasurerRun.decode(s.treasurer, authority, found[1])
    except (IdlError, ValueError, KeyError, IndexError):
        return None
    if run.coordinator_instance != instance_pda(s.coordinator.program_id, run_id):
        return None
    return run


async def require_run(s: Session, run_id: str) -> TreasurerRun:
    """The Treasurer's ``Run`` of ``run_id``, refused if the run is not the Treasurer's."""
    run = await treasurer_run(s, run_id)
    if run is None:
        raise ChainError(
            f"run {run_id!r} was not created through the Treasurer (its coordinator's "
            "main_authority is not a Treasurer Run): it pays no rewards"
        )
    return run
