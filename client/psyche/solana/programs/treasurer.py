"""The Treasurer program's client without a session (docs/rewards.md, "Treasurer"): its
addresses, the ``Run`` account, the instruction builders (bytes and account order from the IDL,
so the cross-language vectors rebuild them with this code) and the share of points a wallet may
still claim. What reads the chain and sends is :mod:`psyche.solana.programs.treasurer_commands`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from solders.instruction import Instruction
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_PROGRAM_ID

from psyche.solana.errors import ChainError
from psyche.solana.idl import IdlError
from psyche.solana.instructions import ProgramClient, instance_pda

__all__ = [
    "RUN_CLOSE_GRACE_SECONDS",
    "TREASURER_PARTICIPANT_SEED",
    "TREASURER_RUN_COLLATERAL_SEED",
    "TREASURER_RUN_SEED",
    "U64_MAX",
    "Claimable",
    "TreasurerRun",
    "claimable",
    "default_treasurer_index",
    "participant_claim_ix",
    "participant_create_ix",
    "participant_pda",
    "run_close_ix",
    "run_collateral_pda",
    "run_create_ix",
    "run_pda",
    "run_update_fields",
    "run_update_ix",
    "run_wind_down_ix",
]

TREASURER_RUN_SEED = b"Run"
TREASURER_RUN_COLLATERAL_SEED = b"RunCollateral"
TREASURER_PARTICIPANT_SEED = b"Participant"
RUN_CLOSE_GRACE_SECONDS = 7 * 24 * 3600
"""Seconds between ``run_wind_down`` and the first allowed ``run_close`` (the program's
constant, checked against the IDL by the tests)."""
U64_MAX = 2**64 - 1


# --- addresses ----------------------------------------------------------------------------------


def run_pda(program: Pubkey, index: int) -> Pubkey:
    """The Treasurer's ``Run`` of ``index``: ``["Run", index u64 LE]``."""
    return Pubkey.find_program_address(
        [TREASURER_RUN_SEED, _check_u64(index).to_bytes(8, "little")], program
    )[0]


def run_collateral_pda(program: Pubkey, run: Pubkey) -> Pubkey:
    """The run's escrow (an SPL token account): ``["RunCollateral", run]``."""
    return Pubkey.find_program_address([TREASURER_RUN_COLLATERAL_SEED, bytes(run)], program)[0]


def participant_pda(program: Pubkey, run: Pubkey, user: Pubkey) -> Pubkey:
    """What ``user`` was paid from ``run``: ``["Participant", run, user]``."""
    seeds = [TREASURER_PARTICIPANT_SEED, bytes(run), bytes(user)]
    return Pubkey.find_program_address(seeds, program)[0]


def default_treasurer_index(run_id: str) -> int:
    """The ``Run`` index ``create-run`` uses for ``run_id``: the first 8 bytes of
    ``sha256(run_id)``, little-endian."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "little")


# --- the Run account ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TreasurerRun:
    """A decoded ``Run`` account and its address."""

    address: Pubkey
    index: int
    main_authority: Pubkey
    join_authority: Pubkey
    coordinator_instance: Pubkey
    coordinator_account: Pubkey
    collateral_mint: Pubkey
    collateral_per_point: int
    total_claimed_points: int
    total_claimed_collateral: int
    wind_down_at: int = 0
    """Cluster unix time of ``run_wind_down``; 0 while the run is not winding down."""

    @classmethod
    def decode(cls, program: ProgramClient, address: Pubkey, data: bytes) -> TreasurerRun:
        raw = program.idl.decode_account("Run", data)

        def key(name: str) -> Pubkey:
            return Pubkey.from_bytes(bytes(raw[name]))

        return cls(
            address=address,
            index=int(raw["index"]),
            main_authority=key("main_authority"),
            join_authority=key("join_authority"),
            coordinator_instance=key("coordinator_instance"),
            coordinator_account=key("coordinator_account"),
            collateral_mint=key("collateral_mint"),
            collateral_per_point=int(raw["collateral_per_point"]),
            total_claimed_points=int(raw["total_claimed_points"]),
            total_claimed_collateral=int(raw["total_claimed_collateral"]),
            wind_down_at=int(raw["wind_down_at"]),
        )

    def collateral(self, program: Pubkey) -> Pubkey:
        return run_collateral_pda(program, self.address)

    def to_json(self, program: Pubkey) -> dict[str, Any]:
        return {
            "run": str(self.address),
            "index": self.index,
            "main_authority": str(self.main_authority),
            "join_authority": str(self.join_authority),
            "coordinator_instance": str(self.coordinator_instance),
            "coordinator_account": str(self.coordinator_account),
            "collateral_mint": str(self.collateral_mint),
            "run_collateral": str(self.collateral(program)),
            "collateral_per_point": self.collateral_per_point,
            "total_claimed_points": self.total_claimed_points,
            "total_claimed_collateral": self.total_claimed_collateral,
            "wind_down_at": self.wind_down_at or None,
            "closable_at": self.wind_down_at + RUN_CLOSE_GRACE_SECONDS
            if self.wind_down_at
            else None,
        }


# --- instructions -------------------------------------------------------------------------------


def run_update_fields(program: ProgramClient) -> list[str]:
    """The fields of ``RunUpdateParams`` in the IDL."""
    ix = program.idl.instruction("run_update")
    (name, tp), *_ = ix.args
    if name != "params":
        return [a for a, _ in ix.args]
    type_name = tp["defined"]["name"] if isinstance(tp.get("defined"), dict) else tp["defined"]
    return [f["name"] for f in program.idl.types[type_name]["type"]["fields"]]


def run_update_ix(
    program: ProgramClient,
    run: TreasurerRun,
    authority: Pubkey,
    coordinator_program: Pubkey,
    fields: Mapping[str, Any],
) -> Instruction:
    """``run_update`` with ``fields`` set (every other field None); ``authority`` signs."""
    names = run_update_fields(program)
    unknown = set(fields) - set(names)
    if unknown:
        raise IdlError(f"run_update has no field(s) {sorted(unknown)}")
    params = {n: fields.get(n) for n in names}
    accounts = {
        "authority": authority,
        "run": run.address,
        "coordinator_instance": run.coordinator_instance,
        "coordinator_account": run.coordinator_account,
        "coordinator_program": coordinator_program,
    }
    return program.build("run_update", {"params": params}, accounts)


def run_create_ix(
    program: ProgramClient,
    coordinator_program: Pubkey,
    *,
    payer: Pubkey,
    main_authority: Pubkey,
    index: int,
    run_id: str,
    client_version: str,
    join_authority: Pubkey,
    collateral_per_point: int,
    collateral_mint: Pubkey,
    coordinator_account: Pubkey,
    local_run: bool = False,
) -> Instruction:
    """``run_create``: the ``Run`` of ``index``, its escrow and (by CPI) the coordinator run
    ``run_id`` in ``coordinator_account`` (created just before, owned by the coordinator)."""
    run = run_pda(program.program_id, index)
    params = {
        "index": index,
        "run_id": run_id,
        "client_version": client_version,
        "join_authority": join_authority,
        "collateral_per_point": collateral_per_point,
        "local_run": local_run,
    }
    accounts = {
        "payer": payer,
        "main_authority": main_authority,
        "run": run,
        "collateral_mint": collateral_mint,
        "run_collateral": run_collateral_pda(program.program_id, run),
        "coordinator_instance": instance_pda(coordinator_program, run_id),
        "coordinator_account": coordinator_account,
        "coordinator_program": coordinator_program,
        "token_program": TOKEN_PROGRAM_ID,
    }
    return program.build("run_create", {"params": params}, accounts)


def participant_create_ix(
    program: ProgramClient, payer: Pubkey, user: Pubkey, run: Pubkey
) -> Instruction:
    """``participant_create``: ``user``'s claim record in ``run`` (``payer`` pays the rent)."""
    accounts = {
        "payer": payer,
        "user": user,
        "run": run,
        "participant": participant_pda(program.program_id, run, user),
    }
    return program.build("participant_create", {}, accounts)


def participant_claim_ix(
    program: ProgramClient, run: TreasurerRun, user: Pubkey, user_collateral: Pubkey, points: int
) -> Instruction:
    """``participant_claim`` of ``points``, paid into ``user_collateral``."""
    accounts = {
        "user": user,
        "user_collateral": user_collateral,
        "run": run.address,
        "run_collateral": run.collateral(program.program_id),
        "participant": participant_pda(program.program_id, run.address, user),
        "coordinator_account": run.coordinator_account,
        "token_program": TOKEN_PROGRAM_ID,
    }
    return program.build("participant_claim", {"params": {"claim_points": points}}, accounts)


def run_wind_down_ix(
    program: ProgramClient, run: TreasurerRun, coordinator_program: Pubkey
) -> Instruction:
    """``run_wind_down``, signed by the run's main authority."""
    accounts = {
        "authority": run.main_authority,
        "run": run.address,
        "coordinator_instance": run.coordinator_instance,
        "coordinator_account": run.coordinator_account,
        "coordinator_program": coordinator_program,
    }
    return program.build("run_wind_down", {}, accounts)


def run_close_ix(
    program: ProgramClient,
    run: TreasurerRun,
    coordinator_program: Pubkey,
    authority_collateral: Pubkey,
) -> Instruction:
    """``run_close``: the escrow's remainder to ``authority_collateral`` (a token account of the
    main authority), the rent to the main authority, which signs."""
    accounts = {
        "authority": run.main_authority,
        "authority_collateral": authority_collateral,
        "run": run.address,
        "run_collateral": run.collateral(program.program_id),
        "coordinator_instance": run.coordinator_instance,
        "coordinator_account": run.coordinator_account,
        "coordinator_program": coordinator_program,
        "token_program": TOKEN_PROGRAM_ID,
    }
    return program.build("run_close", {}, accounts)


# --- points and payments ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claimable:
    """A wallet's standing in a Treasurer run."""

    registered: bool
    earned: int
    slashed: int
    claimed_points: int
    claimed_collateral: int

    @property
    def points(self) -> int:
        """``earned − slashed − claimed_points``, at least 0 (as the program computes it)."""
        return max(0, self.earned - self.slashed - self.claimed_points)


def claimable(
    coordinator_account: Mapping[str, Any], participant: Mapping[str, Any] | None, user: Pubkey
) -> Claimable:
    """What ``user`` may still claim, from the IDL-decoded coordinator account and its
    ``Participant`` (None before its first claim). The registration is the first entry whose
    signer is the wallet, as the program finds it."""
    cs = coordinator_account["state"]["clients_state"]
    entry = next(
        (c for c in cs["clients"][: cs["num_clients"]] if bytes(c["id"]["signer"]) == bytes(user)),
        None,
    )
    return Claimable(
        registered=entry is not None,
        earned=int(entry["earned"]) if entry is not None else 0,
        slashed=int(entry["slashed"]) if entry is not None else 0,
        claimed_points=int(participant["claimed_points"]) if participant else 0,
        claimed_collateral=int(participant["claimed_collateral"]) if participant else 0,
    )


def _check_u64(value: int) -> int:
    if not 0 <= value <= U64_MAX:
        raise ChainError(f"{value} is not a u64")
    return value
