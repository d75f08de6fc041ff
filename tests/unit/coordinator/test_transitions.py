"""Every (run state, event) pair: the resulting run state and result, or the error code.

Each phase fixture (``support.phase``) is a Sim that just entered the phase in a 4-client run with
``witness_nodes = 0`` (every client is a witness) where client ``SILENT`` stopped delivering
results at round 1; active phases sit in round height 2 or later so health checks are possible.
Every event is the "most valid" form of its kind for that phase (an elected witness that has not
reported yet, the silent client's correct committee proof, the elected checkpointer), so the table
shows the phase rules rather than input validation, which test_vectors and test_fuzz cover.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from psyche.coordinator import lost_work
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.coordinator.types import ClientState, CoordinatorException, TickResult
from psyche.protocol.committee import CommitteeProof
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import HubCheckpoint, HubRepo, P2PCheckpoint

from .support import (
    RS,
    SILENT,
    finish_round,
    make_sim,
    phase,
    plain_witness,
    pool,
    state_of,
    timeout_of,
    to_round_train,
    to_warmup,
    trainer_proof,
)

PHASES = [s.name for s in RS]
EVENTS = [
    "tick_before",
    "tick_after",
    "warmup_witness",
    "witness",
    "health_check",
    "checkpoint",
    "withdraw",
    "pause",
    "resume",
]


def _sender(sim: Sim) -> NodeIdentity:
    clients = sim.coord.epoch_state.clients
    return clients[0].id if clients else sim_identity(0)


def _result(r: object) -> str:
    if isinstance(r, TickResult):
        return "Ticked" if r.ticked else f"EpochEnd({str(r.epoch_end).lower()})"
    if isinstance(r, int):
        return f"Dropped({r})"
    return "Ok"


def _tick(sim: Sim, advance: bool) -> object:
    if advance:
        sim.advance(timeout_of(sim) or 1000)
    pending = pool() if sim.coord.run_state is RS.WaitingForMembers else None
    return sim.coord.tick(pending, sim.now, sim.next_seed())


def _witness(sim: Sim) -> object:
    c = sim.coord
    if c.run_state in (RS.RoundTrain, RS.RoundWitness):
        sel = c.committee_selection(c.current_round())
        sent = {w.proof.index for w in c.current_round().witnesses}
        i = next(
            i
            for i in range(len(c.epoch_state.clients))
            if sel.get_witness(i).witness and i not in sent and i != SILENT
        )
        c.witness(c.epoch_state.clients[i].id, sim.round_witness(i), sim.now)
        return None
    c.witness(_sender(sim), plain_witness(0, witness=True), sim.now)
    return None


def _health_check(sim: Sim) -> object:
    c = sim.coord
    target = sim_identity(SILENT)
    proof: CommitteeProof = trainer_proof(SILENT)
    prev = c.previous_round()
    if prev is not None and c.run_state.active:
        index = c.previous_round_clients().index(target)
        proof = c.committee_selection(prev).get_committee(index)
    return c.health_check(_sender(sim), [(target, proof)])


def _checkpoint(sim: Sim) -> object:
    c = sim.coord
    ck = HubCheckpoint(HubRepo(repo_id="psyche/test", revision="v2"))
    if c.run_state is RS.Cooldown:
        k = c.checkpointer_indices()[0]
        return c.checkpoint(c.epoch_state.clients[k].id, k, ck, sim.now)
    return c.checkpoint(_sender(sim), 0, ck, sim.now)


def _warmup_witness(sim: Sim) -> object:
    sim.coord.warmup_witness(_sender(sim), plain_witness(0), sim.now, sim.next_seed())
    return None


def _withdraw(sim: Sim) -> object:
    sim.coord.withdraw(0)
    return None


def _pause(sim: Sim) -> object:
    sim.coord.pause(sim.now)
    return None


def _resume(sim: Sim) -> object:
    sim.coord.resume(sim.now)
    return None


ACTIONS: dict[str, Callable[[Sim], object]] = {
    "tick_before": lambda sim: _tick(sim, advance=False),
    "tick_after": lambda sim: _tick(sim, advance=True),
    "warmup_witness": _warmup_witness,
    "witness": _witness,
    "health_check": _health_check,
    "checkpoint": _checkpoint,
    "withdraw": _withdraw,
    "pause": _pause,
    "resume": _resume,
}

# (phase, event) -> (run state afterwards, result) or (phase, "!Error")
H = "!Halted"
TABLE: dict[str, dict[str, tuple[str, str]]] = {
    "Uninitialized": {
        "tick_before": ("Uninitialized", H),
        "tick_after": ("Uninitialized", H),
        "warmup_witness": ("Uninitialized", H),
        "witness": ("Uninitialized", H),
        "health_check": ("Uninitialized", H),
        "checkpoint": ("Uninitialized", H),
        "withdraw": ("Uninitialized", "!InvalidWithdraw"),
        "pause": ("Uninitialized", H),
        "resume": ("WaitingForMembers", "Ok"),
    },
    "WaitingForMembers": {
        "tick_before": ("WaitingForMembers", "Ticked"),
        "tick_after": ("Warmup", "Ticked"),
        "warmup_witness": ("WaitingForMembers", "!InvalidRunState"),
        "witness": ("WaitingForMembers", "!InvalidRunState"),
        "health_check": ("WaitingForMembers", "!NoActiveRound"),
        "checkpoint": ("WaitingForMembers", "!InvalidRunState"),
        "withdraw": ("WaitingForMembers", "!InvalidWithdraw"),
        "pause": ("Paused", "Ok"),
        "resume": ("WaitingForMembers", "!CannotResume"),
    },
    "Warmup": {
        "tick_before": ("Warmup", "Ticked"),
        "tick_after": ("RoundTrain", "Ticked"),
        "warmup_witness": ("Warmup", "Ok"),
        "witness": ("Warmup", "!InvalidRunState"),
        "health_check": ("Warmup", "!NoActiveRound"),
        "checkpoint": ("Warmup", "!InvalidRunState"),
        "withdraw": ("Warmup", "Ok"),
        "pause": ("Paused", "Ok"),
        "resume": ("Warmup", "!CannotResume"),
    },
    "RoundTrain": {
        "tick_before": ("RoundTrain", "Ticked"),
        "tick_after": ("RoundWitness", "Ticked"),
        "warmup_witness": ("RoundTrain", "Ok"),
        "witness": ("RoundTrain", "Ok"),
        "health_check": ("RoundTrain", "Dropped(1)"),
        "checkpoint": ("RoundTrain", "!InvalidRunState"),
        "withdraw": ("RoundTrain", "Ok"),
        "pause": ("RoundTrain", "Ok"),
        "resume": ("RoundTrain", "!CannotResume"),
    },
    "RoundWitness": {
        "tick_before": ("RoundWitness", "Ticked"),
        "tick_after": ("RoundTrain", "Ticked"),
        "warmup_witness": ("RoundWitness", "!InvalidRunState"),
        "witness": ("RoundWitness", "Ok"),
        "health_check": ("RoundWitness", "Dropped(1)"),
        "checkpoint": ("RoundWitness", "!InvalidRunState"),
        "withdraw": ("RoundWitness", "Ok"),
        "pause": ("RoundWitness", "Ok"),
        "resume": ("RoundWitness", "!CannotResume"),
    },
    "Cooldown": {
        "tick_before": ("Cooldown", "Ticked"),
        "tick_after": ("WaitingForMembers", "EpochEnd(true)"),
        "warmup_witness": ("Cooldown", "!InvalidRunState"),
        "witness": ("Cooldown", "!InvalidRunState"),
        "health_check": ("Cooldown", "Dropped(1)"),
        "checkpoint": ("WaitingForMembers", "EpochEnd(true)"),
        "withdraw": ("Cooldown", "Ok"),
        "pause": ("Cooldown", "Ok"),
        "resume": ("Cooldown", "!CannotResume"),
    },
    "Finished": {
        "tick_before": ("Finished", H),
        "tick_after": ("Finished", H),
        "warmup_witness": ("Finished", H),
        "witness": ("Finished", H),
        "health_check": ("Finished", H),
        "checkpoint": ("Finished", H),
        # withdraw has no run-state check: the last epoch's clients are still listed.
        "withdraw": ("Finished", "Ok"),
        "pause": ("Finished", H),
        "resume": ("Finished", "!CannotResume"),
    },
    "Paused": {
        "tick_before": ("Paused", H),
        "tick_after": ("Paused", H),
        "warmup_witness": ("Paused", H),
        "witness": ("Paused", H),
        "health_check": ("Paused", H),
        "checkpoint": ("Paused", H),
        "withdraw": ("Paused", "!InvalidWithdraw"),
        "pause": ("Paused", H),
        "resume": ("WaitingForMembers", "Ok"),
    },
}

_PHASE_CACHE: dict[str, Sim] = {}


def fresh(name: str) -> Sim:
    if name not in _PHASE_CACHE:
        _PHASE_CACHE[name] = phase(name)
    return copy.deepcopy(_PHASE_CACHE[name])


def test_table_is_complete() -> None:
    assert list(TABLE) == PHASES
    for row in TABLE.values():
        assert list(row) == EVENTS


@pytest.mark.parametrize(
    ("phase_name", "event"),
    [(p, e) for p in PHASES for e in EVENTS],
    ids=[f"{p}-{e}" for p in PHASES for e in EVENTS],
)
def test_transition(phase_name: str, event: str) -> None:
    sim = fresh(phase_name)
    before = state_of(sim)
    want_state, want = TABLE[phase_name][event]
    try:
        got = _result(ACTIONS[event](sim))
    except CoordinatorException as e:
        got = "!" + e.code.name
        assert state_of(sim) == before, "a rejected call changed the state"
    assert (sim.coord.run_state.name, got) == (want_state, want)
    if got == "Ok" and event in ("tick_before",):
        assert state_of(sim) == before


# --- details of individual cells ----------------------------------------------------------------


def test_resume_from_uninitialized_resets_step() -> None:
    sim = fresh("Uninitialized")
    sim.coord.progress.step = 9
    sim.coord.resume(sim.now)
    assert sim.coord.progress.step == 1
    assert sim.coord.run_state is RS.WaitingForMembers


def test_pause_in_waiting_and_warmup_is_immediate() -> None:
    for name in ("WaitingForMembers", "Warmup"):
        sim = fresh(name)
        sim.coord.pause(sim.now)
        assert sim.coord.run_state is RS.Paused
        assert sim.coord.epoch_state.cold_start_epoch
        assert not sim.coord.pending_pause
        assert all(c.state is ClientState.Withdrawn for c in sim.coord.epoch_state.clients)


@pytest.mark.parametrize("name", ["RoundTrain", "RoundWitness", "Cooldown"])
def test_pause_when_active_is_pending(name: str) -> None:
    sim = fresh(name)
    sim.coord.pause(sim.now)
    assert sim.coord.pending_pause and sim.coord.run_state.name == name


def test_cooldown_tick_after_switches_checkpoint_and_epoch() -> None:
    sim = fresh("Cooldown")
    c = sim.coord
    rnd = c.current_round()
    end = rnd.data_index + lost_work.fresh_size(c, rnd)
    _tick(sim, advance=True)
    assert c.progress.epoch == 1
    assert c.progress.epoch_start_data_index == end
    assert isinstance(c.llm.checkpoint, P2PCheckpoint)
    assert not c.epoch_state.cold_start_epoch


def test_checkpoint_records_repo_before_switch() -> None:
    sim = fresh("Cooldown")
    _checkpoint(sim)
    ck = sim.coord.llm.checkpoint
    assert ck == P2PCheckpoint(HubRepo(repo_id="psyche/test", revision="v2"))


def test_health_check_ejects_and_exits_at_next_boundary() -> None:
    sim = fresh("RoundTrain")
    c = sim.coord
    assert _health_check(sim) == 1
    i = c.index_of(sim_identity(SILENT))
    assert i is not None and c.epoch_state.clients[i].state is ClientState.Ejected
    finish_round(sim)
    assert c.index_of(sim_identity(SILENT)) is None
    ex = c.epoch_state.exited_clients[-1]
    assert ex.id == sim_identity(SILENT) and ex.state is ClientState.Ejected
    assert ex.exited_height == c.current_round().height - 1 and ex.exited_index == i


def test_warmup_tick_before_timeout_moves_withdrawn_out() -> None:
    sim = fresh("Warmup")
    sim.coord.withdraw(1)
    _tick(sim, advance=False)
    assert [c.id for c in sim.coord.epoch_state.clients] == [pool()[i] for i in (0, 2, 3)]
    assert sim.coord.epoch_state.exited_clients[0].exited_index == 1


def test_waiting_for_members_without_pending_list() -> None:
    sim = fresh("WaitingForMembers")
    sim.advance(100)
    before = state_of(sim)
    assert sim.coord.tick(None, sim.now, 1).ticked
    assert state_of(sim) == before


def test_round_witness_quorum_needs_one_witness_when_witness_nodes_zero() -> None:
    """With witness_nodes = 0 the quorum is computed from the witness count itself, so any
    non-zero number of witnesses keeps the epoch going (docs/protocol.md, "Quorum")."""
    sim = make_sim()
    to_warmup(sim)
    sim.send_warmup_witnesses()
    sim.send_round_witnesses(1)
    sim.advance(10)
    sim.tick()
    sim.advance(2)
    sim.tick()
    assert sim.coord.run_state is RS.RoundTrain


def test_round_train_fixture_height() -> None:
    sim = make_sim()
    to_round_train(sim)
    assert sim.coord.current_round().height == 2
