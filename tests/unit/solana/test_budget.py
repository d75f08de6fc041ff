"""Every transaction the client sends asks for the compute its instructions need."""

from __future__ import annotations

from solders.compute_budget import set_compute_unit_limit
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer

from psyche.solana.budget import MAX_TX_COMPUTE_UNITS, ComputeBudget, load_limits
from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import ProgramClient, default_idl_dir

COMPUTE_BUDGET = "ComputeBudget111111111111111111111111111111"


def _programs() -> list[ProgramClient]:
    idl = default_idl_dir()
    return [
        ProgramClient(IdlCodec.load(idl / "psyche_coordinator.json")),
        ProgramClient(IdlCodec.load(idl / "psyche_authorizer.json")),
    ]


def _ix(program: ProgramClient, name: str) -> Instruction:
    disc = program.idl.instruction(name).discriminator
    return Instruction(program.program_id, disc + bytes(8), [])


def test_limits_cover_every_coordinator_treasurer_and_pool_instruction_within_the_cap() -> None:
    limits = load_limits()
    idl = default_idl_dir()
    names = ("psyche_coordinator", "psyche_treasurer", "psyche_mining_pool")
    for program in names:
        codec = IdlCodec.load(idl / f"{program}.json")
        assert codec.instructions, program
        for name in codec.instructions:
            assert name in limits, f"no compute-unit limit for {program}.{name}"
            assert 0 < limits[name] <= MAX_TX_COMPUTE_UNITS
    # One table for all programs: no instruction name may mean two things.
    all_names = [n for p in names for n in IdlCodec.load(idl / f"{p}.json").instructions]
    assert len(all_names) == len(set(all_names)), all_names


def test_the_limit_is_prepended_and_summed() -> None:
    coordinator, authorizer = _programs()
    budget = ComputeBudget([coordinator, authorizer])
    limits = load_limits()
    out = budget([_ix(coordinator, "witness")])
    assert str(out[0].program_id) == COMPUTE_BUDGET
    assert out[0] == set_compute_unit_limit(limits["witness"])
    both = budget([_ix(coordinator, "tick"), _ix(coordinator, "health_check")])
    assert both[0] == set_compute_unit_limit(
        min(MAX_TX_COMPUTE_UNITS, limits["tick"] + limits["health_check"])
    )
    a, b = Keypair().pubkey(), Keypair().pubkey()
    other = transfer(TransferParams(from_pubkey=a, to_pubkey=b, lamports=1))
    grantor = _ix(authorizer, "authorization_create")
    assert budget([other, grantor])[0] == set_compute_unit_limit(40_000)
    # A list that already sets its limit is left alone.
    assert budget(out) == out
