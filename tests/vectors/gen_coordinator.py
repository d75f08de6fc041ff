"""Generate the shared test vectors for the coordinator state machine.

Each file in ``tests/vectors/coordinator/`` is one scenario: a full initial state and a list of
events (ticks and messages) with the result of each and the full state after it. The Python
package and the Rust program both replay them (here:
``tests/unit/coordinator/test_vectors_coordinator.py``); ``tests/vectors/README.md`` describes the
format. Regenerate after an intentional change::

    .venv/bin/python tests/vectors/gen_coordinator.py

Scenarios are driven by :class:`psyche.coordinator.scripted_clients.Sim` (honest clients,
deterministic seeds, no clock), so the output is identical on every machine. Every scenario also
asserts, while it is built, that the coordinator did what the scenario's description says; a
behaviour change therefore fails here loudly instead of silently producing different vectors.

A state equal to the one before it is written as the string ``"unchanged"`` to keep files small.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.coordinator.state_json import to_obj_state
from psyche.coordinator.types import ClientState, RunState, Verdict, Witness
from psyche.coordinator.verification import (
    VERIFIERS_PER_ROUND,
    judge,
    sampled_trainers,
    verdict_error,
)
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import Committee, CommitteeProof, WitnessProof
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.data_selection import BatchId, assign_data_for_state
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import (
    Checkpoint,
    DummyCheckpoint,
    GcsCheckpoint,
    GcsRepo,
    HubCheckpoint,
    HubRepo,
    P2PCheckpoint,
    ServerData,
)
from psyche.protocol.lr_schedules import CosineLR
from psyche.protocol.model import LLM, LLMArchitecture, LLMDataType
from psyche.protocol.optimizers import DistroOptimizer
from psyche.protocol.shuffle import deterministic_shuffle

OUT_DIR = Path(__file__).resolve().parent / "coordinator"
VERIFICATION_DIR = Path(__file__).resolve().parent / "verification"
UNCHANGED = "unchanged"

RS = RunState


def dumps(obj: object) -> str:
    return json.dumps(obj, indent=None, separators=(",", ":"), sort_keys=False) + "\n"


# --- building blocks ----------------------------------------------------------------------------


def config(**overrides: int) -> CoordinatorConfig:
    """A small valid config; scenarios override what they exercise."""
    base: dict[str, int] = {
        "warmup_time": 20,
        "cooldown_time": 10,
        "max_round_train_time": 10,
        "round_witness_time": 2,
        "global_batch_size_warmup_tokens": 0,
        "epoch_time": 600,
        "total_steps": 100,
        "init_min_clients": 3,
        "min_clients": 2,
        "witness_nodes": 1,
        "global_batch_size_start": 6,
        "global_batch_size_end": 6,
        "verification_percent": 0,
        "waiting_for_members_extra_time": 2,
    }
    base.update(overrides)
    cfg = CoordinatorConfig(**base)
    return cfg


HUB = HubCheckpoint(HubRepo(repo_id="psyche/vec-model", revision=None))
GCS = GcsCheckpoint(GcsRepo(bucket="psyche-vec", prefix="ckpt"))
DUMMY = DummyCheckpoint(HubRepo(repo_id="psyche/dummy", revision="main"))


def model(checkpoint: Checkpoint = HUB, max_seq_len: int = 8) -> LLM:
    return LLM(
        max_seq_len=max_seq_len,
        cold_start_warmup_steps=0,
        architecture=LLMArchitecture.HfLlama,
        checkpoint=checkpoint,
        data_type=LLMDataType.Pretraining,
        data_location=ServerData("127.0.0.1:20001"),
        lr_schedule=CosineLR(
            base_lr=4e-3, warmup_steps=2, warmup_init_lr=0.0, total_steps=100, final_lr=4e-4
        ),
        optimizer=DistroOptimizer(
            clip_grad_norm=1.0,
            compression_decay=0.999,
            compression_topk=8,
            compression_chunk=64,
            quantize_1bit=True,
        ),
    )


def ids(n: int, first: int = 0) -> list[NodeIdentity]:
    return [sim_identity(i) for i in range(first, first + n)]


STRANGER = sim_identity(999)


@dataclass
class Scenario:
    """One vector file under construction: a Sim plus the point where recording started."""

    name: str
    description: str
    sim: Sim
    initial: dict[str, Any] | None = None

    # --- access ---------------------------------------------------------------------------------

    @property
    def c(self) -> Coordinator:
        return self.sim.coord

    @property
    def cfg(self) -> CoordinatorConfig:
        return self.sim.coord.config

    @property
    def state(self) -> RunState:
        return self.sim.coord.run_state

    def client(self, index: int) -> NodeIdentity:
        return self.c.epoch_state.clients[index].id

    # --- recording ------------------------------------------------------------------------------

    def start(self) -> None:
        """Everything before this is setup: the current state becomes ``initial``."""
        self.initial = to_obj_state(self.c)
        self.sim.events.clear()

    def expect(self, state: RunState, outcome: str | None = None) -> None:
        """Assert the run state and, if given, the last event's result or error name."""
        assert self.state is state, f"{self.name}: expected {state.name}, got {self.state.name}"
        if outcome is not None:
            last = self.sim.events[-1]
            got = last.get("ok", last.get("error"))
            assert got == outcome, f"{self.name}: expected {outcome}, got {got} ({last['event']})"

    def to_obj(self) -> dict[str, Any]:
        initial = self.initial if self.initial is not None else to_obj_state(self.c)
        steps: list[dict[str, Any]] = []
        prev = initial
        for ev in self.sim.events:
            step = dict(ev)
            if ev["state"] == prev:
                step["state"] = UNCHANGED
            else:
                prev = ev["state"]
            steps.append(step)
        assert steps, f"{self.name}: no events"
        return {
            "name": self.name,
            "description": self.description,
            "initial": initial,
            "steps": steps,
        }

    # --- driving --------------------------------------------------------------------------------

    def join(self, who: Sequence[NodeIdentity]) -> None:
        """From Uninitialized/Paused/WaitingForMembers into Warmup with ``who``."""
        if self.state in (RS.Uninitialized, RS.Paused):
            self.sim.resume()
        self.expect(RS.WaitingForMembers)
        self.sim.advance(self.cfg.waiting_for_members_extra_time)
        self.sim.tick(list(who))
        self.expect(RS.Warmup, "Ticked")

    def warmup_by_timeout(self) -> None:
        self.sim.advance(self.cfg.warmup_time)
        self.sim.tick()
        self.expect(RS.RoundTrain, "Ticked")

    def warmup_by_witnesses(self) -> None:
        self.sim.send_warmup_witnesses()
        self.expect(RS.RoundTrain)

    def begin(self, who: Sequence[NodeIdentity]) -> None:
        self.join(who)
        self.warmup_by_witnesses()

    def train_timeout(self) -> None:
        self.sim.advance(self.cfg.max_round_train_time)
        self.sim.tick()
        self.expect(RS.RoundWitness, "Ticked")

    def witness_timeout(self) -> None:
        self.sim.advance(self.cfg.round_witness_time)
        self.sim.tick()

    def round(self, witnesses: int | None = None) -> None:
        """Play one round: elected witnesses (all, or ``witnesses`` of them), then timeouts."""
        self.expect(RS.RoundTrain)
        self.sim.send_round_witnesses(witnesses)
        if self.state is RS.RoundTrain:
            self.train_timeout()
        self.expect(RS.RoundWitness)
        self.witness_timeout()

    def rounds_until(self, state: RunState, limit: int = 20) -> None:
        for _ in range(limit):
            if self.state is state:
                return
            self.round()
        self.expect(state)

    def cooldown_timeout(self) -> None:
        self.expect(RS.Cooldown)
        self.sim.advance(self.cfg.cooldown_time)
        self.sim.tick()

    def witness_of_round(self) -> set[int]:
        """Indices of the current round's elected witnesses."""
        rnd = self.c.current_round()
        sel = self.c.committee_selection(rnd)
        return {i for i in range(rnd.clients_len) if sel.get_witness(i).witness}

    def elected_witness(self) -> int:
        return min(self.witness_of_round())

    def non_witness(self) -> int:
        elected = self.witness_of_round()
        return next(i for i in range(self.c.current_round().clients_len) if i not in elected)

    def try_plan(self, candidates: Sequence[Any], plan: Callable[[Scenario, Any], bool]) -> Any:
        """The first candidate for which ``plan`` succeeds on a copy of this scenario; then run
        the plan for real. Used to pick clients that are (not) elected in upcoming rounds."""
        for cand in candidates:
            trial = copy.deepcopy(self)
            try:
                ok = plan(trial, cand)
            except AssertionError:
                ok = False
            if ok:
                assert plan(self, cand)
                return cand
        raise AssertionError(f"{self.name}: no candidate fits the plan")


def new(
    name: str,
    description: str,
    cfg: CoordinatorConfig | None = None,
    mdl: LLM | None = None,
    run_id: str = "vectors",
) -> Scenario:
    cfg = cfg or config()
    cfg.check()
    mdl = mdl or model()
    mdl.check()
    coord = Coordinator(run_id=run_id, config=cfg, model=mdl)
    return Scenario(name=name, description=description, sim=Sim(coord))


def empty_witness(index: int, position: int | None = None, witness: bool = False) -> Witness:
    pos = index if position is None else position
    return Witness(
        WitnessProof(position=pos, index=index, witness=witness), Bloom.empty(), Bloom.empty()
    )


def with_proof(w: Witness, **changes: Any) -> Witness:
    p = w.proof
    proof = WitnessProof(
        position=changes.get("position", p.position),
        index=changes.get("index", p.index),
        witness=changes.get("witness", p.witness),
    )
    return Witness(proof, w.participant_bloom.copy(), w.broadcast_bloom.copy())


def prev_proof(s: Scenario, index: int) -> CommitteeProof:
    prev = s.c.previous_round()
    assert prev is not None
    return s.c.committee_selection(prev).get_committee(index)


# --- scenarios ----------------------------------------------------------------------------------

SCENARIOS: list[Callable[[], Scenario]] = []


def scenario(fn: Callable[[], Scenario]) -> Callable[[], Scenario]:
    SCENARIOS.append(fn)
    return fn


# WaitingForMembers


@scenario
def wfm_not_enough_pending() -> Scenario:
    s = new(
        "wfm_not_enough_pending",
        "WaitingForMembers stays put while fewer than init_min_clients (3) distinct clients are "
        "pending (duplicates count once), then enters Warmup with exactly the pending clients.",
    )
    s.sim.resume()
    s.start()
    s.sim.advance(5)
    s.sim.tick(ids(2))
    s.expect(RS.WaitingForMembers, "Ticked")
    a, b = ids(2)
    s.sim.tick([a, b, a, b])
    s.expect(RS.WaitingForMembers, "Ticked")
    s.sim.tick([b, a, sim_identity(2)])
    s.expect(RS.Warmup, "Ticked")
    assert s.c.epoch_state.clients[0].id == b
    return s


@scenario
def wfm_extra_time_grace() -> Scenario:
    s = new(
        "wfm_extra_time_grace",
        "Enough clients are pending, but WaitingForMembers waits waiting_for_members_extra_time "
        "(5 s) after it was entered: ticks at +0 s and +4 s change nothing, +5 s enters Warmup.",
        config(waiting_for_members_extra_time=5),
    )
    s.sim.resume()
    s.start()
    s.sim.tick(ids(3))
    s.expect(RS.WaitingForMembers, "Ticked")
    s.sim.advance(4)
    s.sim.tick(ids(3))
    s.expect(RS.WaitingForMembers, "Ticked")
    s.sim.advance(1)
    s.sim.tick(ids(3))
    s.expect(RS.Warmup, "Ticked")
    return s


@scenario
def wfm_pending_none() -> Scenario:
    s = new(
        "wfm_pending_none",
        "A tick without a pending list (pending = null) never leaves WaitingForMembers.",
    )
    s.sim.resume()
    s.start()
    s.sim.advance(100)
    s.sim.tick(None)
    s.expect(RS.WaitingForMembers, "Ticked")
    s.sim.tick([])
    s.expect(RS.WaitingForMembers, "Ticked")
    return s


@scenario
def wfm_pending_capped_256() -> Scenario:
    s = new(
        "wfm_pending_capped_256",
        "300 pending entries (290 distinct, the first 10 repeated at the end): the epoch takes the "
        "first 256 distinct clients in pending order.",
    )
    s.sim.resume()
    s.start()
    s.sim.advance(2)
    pending = ids(290) + ids(10)
    s.sim.tick(pending)
    s.expect(RS.Warmup, "Ticked")
    assert len(s.c.epoch_state.clients) == 256
    assert s.c.epoch_state.clients[-1].id == sim_identity(255)
    return s


def _after_first_epoch(s: Scenario, who: Sequence[NodeIdentity]) -> None:
    """Play a whole epoch that ends by the epoch timeout (drain rounds) and Cooldown timeout."""
    s.begin(who)
    s.rounds_until(RS.Cooldown)
    s.cooldown_timeout()
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")


def _short_epochs(**overrides: int) -> CoordinatorConfig:
    """Epochs of four rounds when witnesses arrive at once: round 1's witness timeout reaches
    epoch_time (12 s), then two drain rounds."""
    values = {"epoch_time": 12, "warmup_time": 10, "round_witness_time": 6, "cooldown_time": 5}
    values.update(overrides)
    return config(**values)


@scenario
def wfm_p2p_to_hub_no_survivor() -> Scenario:
    s = new(
        "wfm_p2p_to_hub_no_survivor",
        "After an epoch the checkpoint is P2P. None of the previous epoch's clients is pending, so "
        "leaving WaitingForMembers switches it back to Hub (new joiners cannot fetch from peers).",
        _short_epochs(),
    )
    _after_first_epoch(s, ids(3))
    assert isinstance(s.c.llm.checkpoint, P2PCheckpoint)
    s.start()
    s.sim.advance(2)
    s.sim.tick(ids(3, first=10))
    s.expect(RS.Warmup, "Ticked")
    assert isinstance(s.c.llm.checkpoint, HubCheckpoint)
    return s


@scenario
def wfm_p2p_kept_with_survivor() -> Scenario:
    s = new(
        "wfm_p2p_kept_with_survivor",
        "After an epoch the checkpoint is P2P; one previous client rejoins with two new ones, so "
        "the checkpoint stays P2P.",
        _short_epochs(),
    )
    _after_first_epoch(s, ids(3))
    s.start()
    s.sim.advance(2)
    s.sim.tick([*ids(2, first=10), sim_identity(1)])
    s.expect(RS.Warmup, "Ticked")
    assert isinstance(s.c.llm.checkpoint, P2PCheckpoint)
    return s


@scenario
def wfm_p2pgcs_to_gcs_no_survivor() -> Scenario:
    s = new(
        "wfm_p2pgcs_to_gcs_no_survivor",
        "A Gcs run: Cooldown's end switches Gcs to P2PGcs; when no previous client rejoins, "
        "leaving WaitingForMembers switches P2PGcs back to Gcs.",
        _short_epochs(),
        model(GCS),
    )
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    s.start()
    s.cooldown_timeout()
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert type(s.c.llm.checkpoint).TAG == "P2PGcs"
    s.sim.advance(2)
    s.sim.tick(ids(3, first=20))
    s.expect(RS.Warmup, "Ticked")
    assert isinstance(s.c.llm.checkpoint, GcsCheckpoint)
    return s


def _multi_epoch_config() -> CoordinatorConfig:
    """Epochs of three or four rounds: round 0 or 1 reaches epoch_time, then two drain rounds."""
    return config(
        epoch_time=8,
        warmup_time=5,
        max_round_train_time=5,
        round_witness_time=4,
        cooldown_time=3,
        waiting_for_members_extra_time=1,
    )


# Warmup


@scenario
def warmup_timeout_to_round_train() -> Scenario:
    s = new(
        "warmup_timeout_to_round_train",
        "Without warmup witnesses, Warmup lasts warmup_time (20 s): a tick at +19 s changes "
        "nothing, at +20 s round 0 starts at epoch_start_data_index with clients_len = 3.",
    )
    s.join(ids(3))
    s.start()
    s.sim.tick()
    s.expect(RS.Warmup, "Ticked")
    s.sim.advance(19)
    s.sim.tick()
    s.expect(RS.Warmup, "Ticked")
    s.sim.advance(1)
    s.sim.tick()
    s.expect(RS.RoundTrain, "Ticked")
    return s


@scenario
def warmup_witnesses_reach_count() -> Scenario:
    s = new(
        "warmup_witnesses_reach_count",
        "witness_nodes = 2: the first warmup witness is stored, the second reaches the count and "
        "starts round 0 at once (clearing the stored warmup witnesses); a third is ignored.",
        config(witness_nodes=2),
    )
    s.join(ids(3))
    s.start()
    s.sim.advance(1)
    s.sim.warmup_witness(s.client(2), empty_witness(2))
    s.expect(RS.Warmup, "Ok")
    s.sim.warmup_witness(s.client(0), empty_witness(0))
    s.expect(RS.RoundTrain, "Ok")
    s.sim.warmup_witness(s.client(1), empty_witness(1))
    s.expect(RS.RoundTrain, "Ok")
    return s


@scenario
def warmup_witness_nodes_zero() -> Scenario:
    s = new(
        "warmup_witness_nodes_zero",
        "witness_nodes = 0 means min(#clients, 32) witnesses: all 3 clients must send a warmup "
        "witness before round 0 starts early.",
        config(witness_nodes=0),
    )
    s.join(ids(3))
    s.start()
    for i in range(3):
        s.sim.warmup_witness(s.client(i), empty_witness(i))
        s.expect(RS.Warmup if i < 2 else RS.RoundTrain, "Ok")
    return s


@scenario
def warmup_withdraw_below_min_clients() -> Scenario:
    s = new(
        "warmup_withdraw_below_min_clients",
        "Two of three clients withdraw during Warmup; the next tick moves them to exited_clients, "
        "finds 1 < min_clients (2) and returns EpochEnd(false) back to WaitingForMembers.",
    )
    s.join(ids(3))
    s.start()
    s.sim.withdraw(0)
    s.expect(RS.Warmup, "Ok")
    s.sim.advance(1)
    s.sim.tick()
    s.expect(RS.Warmup, "Ticked")
    s.sim.withdraw(1)
    s.expect(RS.Warmup, "Ok")
    s.sim.advance(1)
    s.sim.tick()
    s.expect(RS.WaitingForMembers, "EpochEnd(false)")
    return s


@scenario
def warmup_witness_rejected() -> Scenario:
    s = new(
        "warmup_witness_rejected",
        "Warmup witnesses are validated (our deviation): an index that is not the sender's, an "
        "out-of-range index, a non-member and a withdrawn client give InvalidWitness; a second "
        "witness from the same client gives DuplicateWitness.",
        config(init_min_clients=4, witness_nodes=2),
    )
    s.join(ids(4))
    s.start()
    s.sim.warmup_witness(s.client(0), empty_witness(1))
    s.expect(RS.Warmup, "InvalidWitness")
    s.sim.warmup_witness(s.client(0), empty_witness(7))
    s.expect(RS.Warmup, "InvalidWitness")
    s.sim.warmup_witness(STRANGER, empty_witness(0))
    s.expect(RS.Warmup, "InvalidWitness")
    s.sim.withdraw(3)
    s.sim.warmup_witness(s.client(3), empty_witness(3))
    s.expect(RS.Warmup, "InvalidWitness")
    s.sim.warmup_witness(s.client(1), empty_witness(1))
    s.expect(RS.Warmup, "Ok")
    s.sim.warmup_witness(s.client(1), empty_witness(1, position=5, witness=True))
    s.expect(RS.Warmup, "DuplicateWitness")
    return s


@scenario
def warmup_witness_wrong_state() -> Scenario:
    s = new(
        "warmup_witness_wrong_state",
        "warmup_witness outside Warmup: InvalidRunState in WaitingForMembers, RoundWitness and "
        "Cooldown; in RoundTrain (a late warmup witness) it is ignored and returns Ok.",
        config(witness_nodes=1),
    )
    s.sim.resume()
    s.start()
    s.sim.warmup_witness(sim_identity(0), empty_witness(0))
    s.expect(RS.WaitingForMembers, "InvalidRunState")
    s.join(ids(3))
    s.warmup_by_witnesses()
    s.sim.warmup_witness(s.client(1), empty_witness(1))
    s.expect(RS.RoundTrain, "Ok")
    s.sim.send_round_witnesses()
    s.expect(RS.RoundWitness)
    s.sim.warmup_witness(s.client(1), empty_witness(1))
    s.expect(RS.RoundWitness, "InvalidRunState")
    s.sim.pause()
    s.witness_timeout()
    s.rounds_until(RS.Cooldown)
    s.sim.warmup_witness(s.client(1), empty_witness(1))
    s.expect(RS.Cooldown, "InvalidRunState")
    return s


@scenario
def warmup_witness_remap_then_start() -> Scenario:
    s = new(
        "warmup_witness_remap_then_start",
        "Stored warmup witnesses name client indices. Clients 1, 3 and 4 send one (witness_nodes "
        "4; client 4 claims position 40, which Warmup does not check), then client 1 withdraws; "
        "the next Warmup tick moves it out, drops its witness and remaps index and position of "
        "the others (3→2, 4→3; position 40 becomes 3). Client 4 (now index 3) is still "
        "recognised as a duplicate; client 0 and client 2 bring the count to 4 and start round 0.",
        config(init_min_clients=5, min_clients=4, witness_nodes=4),
    )
    s.join(ids(5))
    s.start()
    c1, c2, c3, c4 = (s.client(i) for i in (1, 2, 3, 4))
    for i in (1, 3, 4):
        # Warmup positions are not checked; client 4 claims position 40 to show the remap
        # rewrites the stored position to the new index as well.
        s.sim.warmup_witness(s.client(i), empty_witness(i, position=40 if i == 4 else i))
        s.expect(RS.Warmup, "Ok")
    s.sim.withdraw(1)
    s.sim.advance(1)
    s.sim.tick()
    s.expect(RS.Warmup, "Ticked")
    ws = s.c.current_round().witnesses
    assert [(w.proof.index, w.proof.position) for w in ws] == [(2, 2), (3, 3)], ws
    assert s.client(3) == c4 and s.client(2) == c3
    s.sim.warmup_witness(c4, empty_witness(3))
    s.expect(RS.Warmup, "DuplicateWitness")
    s.sim.warmup_witness(c1, empty_witness(1))
    s.expect(RS.Warmup, "InvalidWitness")
    s.sim.warmup_witness(s.client(0), empty_witness(0))
    s.expect(RS.Warmup, "Ok")
    s.sim.warmup_witness(c2, empty_witness(1))
    s.expect(RS.RoundTrain, "Ok")
    assert s.c.current_round().clients_len == 4
    return s


@scenario
def warmup_timeout_with_withdrawn_client() -> Scenario:
    s = new(
        "warmup_timeout_with_withdrawn_client",
        "A client withdraws during Warmup and no tick runs before the warmup timeout: round 0 "
        "starts with it still listed (clients_len = 4); it leaves at round 0's witness timeout "
        "(exited_height 0, exited_index 2) and round 1 has clients_len = 3.",
        config(init_min_clients=4),
    )
    s.join(ids(4))
    s.start()
    s.sim.withdraw(2)
    s.warmup_by_timeout()
    assert s.c.current_round().clients_len == 4
    s.round()
    s.expect(RS.RoundTrain, "Ticked")
    assert s.c.current_round().clients_len == 3
    return s


# RoundTrain


@scenario
def round_train_timeout_to_witness() -> Scenario:
    s = new(
        "round_train_timeout_to_witness",
        "No witness arrives: RoundTrain lasts max_round_train_time (10 s), a tick at +9 s changes "
        "nothing, +10 s enters RoundWitness; a late witness is still accepted in RoundWitness and "
        "the round then ends at its timeout.",
    )
    s.begin(ids(3))
    s.start()
    s.sim.advance(9)
    s.sim.tick()
    s.expect(RS.RoundTrain, "Ticked")
    s.sim.advance(1)
    s.sim.tick()
    s.expect(RS.RoundWitness, "Ticked")
    s.sim.send_round_witnesses()
    s.expect(RS.RoundWitness, "Ok")
    s.witness_timeout()
    s.expect(RS.RoundTrain, "Ticked")
    return s


@scenario
def round_train_opportunistic_witness() -> Scenario:
    s = new(
        "round_train_opportunistic_witness",
        "witness_nodes = 2 of 4 clients: the first elected witness is stored, the second reaches "
        "the count and ends RoundTrain early (RoundWitness at once); RoundWitness is then waited "
        "in full (a tick at +1 s changes nothing, +2 s starts the next round).",
        config(init_min_clients=4, witness_nodes=2),
    )
    s.begin(ids(4))
    s.round()
    s.start()
    s.sim.advance(1)
    first, second = sorted(s.witness_of_round())
    s.sim.witness(s.client(second), s.sim.round_witness(second))
    s.expect(RS.RoundTrain, "Ok")
    s.sim.witness(s.client(first), s.sim.round_witness(first))
    s.expect(RS.RoundWitness, "Ok")
    s.sim.advance(1)
    s.sim.tick()
    s.expect(RS.RoundWitness, "Ticked")
    s.sim.advance(1)
    s.sim.tick()
    s.expect(RS.RoundTrain, "Ticked")
    return s


@scenario
def witness_rejected() -> Scenario:
    s = new(
        "witness_rejected",
        "Round witnesses are verified against the current round's committee selection: a wrong "
        "position, a false witness flag, another client's index, a non-elected client claiming "
        "to be a witness and a stranger all give InvalidWitness; a second witness from the elected "
        "client gives DuplicateWitness.",
        config(init_min_clients=4, witness_nodes=2),
    )
    s.begin(ids(4))
    s.round()
    s.start()
    w_idx = s.elected_witness()
    other = s.non_witness()
    good = s.sim.round_witness(w_idx)
    who = s.client(w_idx)
    s.sim.witness(who, with_proof(good, position=(good.proof.position + 1) % 4))
    s.expect(RS.RoundTrain, "InvalidWitness")
    s.sim.witness(who, with_proof(good, witness=False))
    s.expect(RS.RoundTrain, "InvalidWitness")
    s.sim.witness(who, with_proof(good, index=other))
    s.expect(RS.RoundTrain, "InvalidWitness")
    s.sim.witness(s.client(other), s.sim.round_witness(other))
    s.expect(RS.RoundTrain, "InvalidWitness")
    s.sim.witness(s.client(other), with_proof(s.sim.round_witness(other), witness=True))
    s.expect(RS.RoundTrain, "InvalidWitness")
    s.sim.witness(STRANGER, good)
    s.expect(RS.RoundTrain, "InvalidWitness")
    s.sim.witness(who, good)
    s.expect(RS.RoundTrain, "Ok")
    s.sim.witness(who, good)
    s.expect(RS.RoundTrain, "DuplicateWitness")
    return s


@scenario
def witness_wrong_state_and_unhealthy_sender() -> Scenario:
    s = new(
        "witness_wrong_state_and_unhealthy_sender",
        "witness in WaitingForMembers and Warmup gives InvalidRunState; an elected witness that "
        "withdrew is no longer a healthy client and gets InvalidWitness.",
        config(),
    )
    s.sim.resume()
    s.start()
    s.sim.witness(sim_identity(0), empty_witness(0, witness=True))
    s.expect(RS.WaitingForMembers, "InvalidRunState")
    s.join(ids(3))
    s.sim.witness(s.client(0), empty_witness(0, witness=True))
    s.expect(RS.Warmup, "InvalidRunState")
    s.warmup_by_witnesses()
    w_idx = s.elected_witness()
    good = s.sim.round_witness(w_idx)
    s.sim.withdraw(w_idx)
    s.sim.witness(s.client(w_idx), good)
    s.expect(RS.RoundTrain, "InvalidWitness")
    return s


# RoundWitness


@scenario
def round_witness_data_index_advances() -> Scenario:
    s = new(
        "round_witness_data_index_advances",
        "Four full rounds with a constant batch size (6): each RoundWitness timeout increments the "
        "step, starts the next round in the ring of 4 (rounds_head wraps), height + 1 and "
        "data_index + 6.",
    )
    s.begin(ids(3))
    s.start()
    for h in range(5):
        rnd = s.c.current_round()
        assert (rnd.height, rnd.data_index) == (h, 6 * h)
        s.round()
        s.expect(RS.RoundTrain, "Ticked")
    assert s.c.epoch_state.rounds_head == 1
    return s


@scenario
def round_witness_batch_ramp() -> Scenario:
    s = new(
        "round_witness_batch_ramp",
        "global_batch_size_warmup_tokens = 8 with max_seq_len 1 and batch 1→5: a round's batch "
        "size is round(1 + 4·tokens/8) with tokens = data_index·max_seq_len, rounding half away "
        "from zero (1.5 → 2, 2.5 → 3), and end (5) once tokens >= 8; data_index goes 0, 1, 3, 6, "
        "10, 15 (sizes 1, 2, 3, 4, 5).",
        config(
            global_batch_size_warmup_tokens=8, global_batch_size_start=1, global_batch_size_end=5
        ),
        model(max_seq_len=1),
    )
    s.begin(ids(3))
    s.start()
    seen = []
    for _ in range(5):
        seen.append(s.c.current_round().data_index)
        s.round()
    seen.append(s.c.current_round().data_index)
    assert seen == [0, 1, 3, 6, 10, 15], seen
    return s


@scenario
def round_witness_zero_witnesses() -> Scenario:
    s = new(
        "round_witness_zero_witnesses",
        "A round ends with no witness at all: the step still advances, every client is withdrawn "
        "(nobody can tell who is alive) and Cooldown starts; at its end everyone is moved to "
        "exited_clients.",
    )
    s.begin(ids(3))
    s.round()
    s.start()
    s.train_timeout()
    s.witness_timeout()
    s.expect(RS.Cooldown, "Ticked")
    assert all(c.state is ClientState.Withdrawn for c in s.c.epoch_state.clients)
    s.cooldown_timeout()
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert not s.c.epoch_state.clients
    return s


@scenario
def round_witness_below_min_clients() -> Scenario:
    s = new(
        "round_witness_below_min_clients",
        "Two of three clients withdraw during a round; at its witness timeout they leave and "
        "1 < min_clients, so Cooldown starts at once (no drain rounds).",
    )
    s.begin(ids(3))
    s.start()
    w = s.elected_witness()
    for i in range(3):
        if i != w:
            s.sim.withdraw(i)
    s.round()
    s.expect(RS.Cooldown, "Ticked")
    assert s.c.epoch_state.last_step == 0
    return s


@scenario
def round_witness_below_quorum() -> Scenario:
    s = new(
        "round_witness_below_quorum",
        "witness_nodes = 2 (quorum 2) but only one elected witness reports; at the witness "
        "timeout 1 < quorum and Cooldown starts.",
        config(init_min_clients=4, witness_nodes=2),
    )
    s.begin(ids(4))
    s.start()
    s.round(witnesses=1)
    s.expect(RS.Cooldown, "Ticked")
    return s


@scenario
def round_witness_epoch_timeout_drain() -> Scenario:
    s = new(
        "round_witness_epoch_timeout_drain",
        "epoch_time = 25 s: the first witness timeout at or after it sets last_step = step + 2; "
        "two more (drain) rounds run, each consuming a step and a data range, and the witness "
        "timeout that reaches last_step starts Cooldown.",
        _short_epochs(),
    )
    s.begin(ids(3))
    s.start()
    s.rounds_until(RS.Cooldown)
    es = s.c.epoch_state
    assert es.last_step == s.c.progress.step and es.last_step >= 4
    return s


@scenario
def round_witness_total_steps_finished() -> Scenario:
    s = new(
        "round_witness_total_steps_finished",
        "total_steps = 4: reaching step 4 winds the epoch down through two drain rounds (our "
        "deviation: the reference stopped at once and lost two rounds of results), Cooldown ends "
        "with EpochEnd(true) and, as step >= total_steps, the run is Finished.",
        config(total_steps=4),
    )
    s.begin(ids(3))
    s.round()
    s.start()
    s.rounds_until(RS.Cooldown)
    assert s.c.progress.step == 6
    s.cooldown_timeout()
    s.expect(RS.Finished, "EpochEnd(true)")
    return s


@scenario
def round_witness_pending_pause_paused() -> Scenario:
    s = new(
        "round_witness_pending_pause_paused",
        "pause during RoundTrain only sets pending_pause; the next witness timeout winds down "
        "through two drain rounds, Cooldown's end withdraws everyone and enters Paused with "
        "cold_start_epoch; resume returns to WaitingForMembers and, as nobody from the paused "
        "epoch can survive, P2P switches back to Hub in the next epoch, which keeps cold_start.",
    )
    s.begin(ids(3))
    s.round()
    s.start()
    s.sim.pause()
    s.expect(RS.RoundTrain, "Ok")
    assert s.c.pending_pause
    s.sim.pause()
    s.expect(RS.RoundTrain, "Ok")
    s.rounds_until(RS.Cooldown)
    s.cooldown_timeout()
    s.expect(RS.Paused, "EpochEnd(true)")
    assert s.c.epoch_state.cold_start_epoch and not s.c.pending_pause
    s.sim.advance(30)
    s.sim.resume()
    s.expect(RS.WaitingForMembers, "Ok")
    s.sim.advance(2)
    s.sim.tick(ids(3))
    s.expect(RS.Warmup, "Ticked")
    assert isinstance(s.c.llm.checkpoint, HubCheckpoint) and s.c.epoch_state.cold_start_epoch
    return s


# Cooldown


@scenario
def cooldown_timeout_hub_to_p2p() -> Scenario:
    s = new(
        "cooldown_timeout_hub_to_p2p",
        "Cooldown lasts cooldown_time (10 s) without a checkpoint: at its end the epoch counter "
        "increments, epoch_start_data_index = last round's data_index + its batch size, Hub "
        "becomes P2P, cold_start_epoch is cleared and the run waits for members (EpochEnd(true)).",
        _short_epochs(cooldown_time=10),
    )
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    s.start()
    last = s.c.current_round().data_index
    s.sim.advance(9)
    s.sim.tick()
    s.expect(RS.Cooldown, "Ticked")
    s.sim.advance(1)
    s.sim.tick()
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert s.c.progress.epoch == 1 and s.c.progress.epoch_start_data_index == last + 6
    assert isinstance(s.c.llm.checkpoint, P2PCheckpoint)
    return s


@scenario
def cooldown_gcs_to_p2pgcs() -> Scenario:
    s = new(
        "cooldown_gcs_to_p2pgcs",
        "A Gcs checkpoint becomes P2PGcs at the end of Cooldown.",
        _short_epochs(),
        model(GCS),
    )
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    s.start()
    s.cooldown_timeout()
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert type(s.c.llm.checkpoint).TAG == "P2PGcs"
    return s


@scenario
def cooldown_dummy_to_p2p() -> Scenario:
    s = new(
        "cooldown_dummy_to_p2p",
        "A Dummy checkpoint becomes P2P (same repo) at the end of Cooldown; a Hub checkpoint "
        "report on a Dummy run is not a valid transition (InvalidCheckpoint).",
        _short_epochs(),
        model(DUMMY),
    )
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    s.start()
    k = s.c.checkpointer_indices()[0]
    s.sim.checkpoint(s.client(k), k, HubCheckpoint(HubRepo(repo_id="x/y", revision="r1")))
    s.expect(RS.Cooldown, "InvalidCheckpoint")
    s.cooldown_timeout()
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert s.c.llm.checkpoint == P2PCheckpoint(DUMMY.repo)
    return s


@scenario
def checkpoint_elected_ends_cooldown() -> Scenario:
    s = new(
        "checkpoint_elected_ends_cooldown",
        "6 clients, so max(1, 6 // 3) = 2 checkpointers are elected from the last round's seed "
        "salted 'checkpointer'. One of them reports a Hub checkpoint: the repo is recorded, "
        "Cooldown ends at once (EpochEnd(true)) and Hub becomes P2P with the new revision.",
        _short_epochs(init_min_clients=6, witness_nodes=2),
    )
    s.begin(ids(6))
    s.rounds_until(RS.Cooldown)
    s.start()
    elected = s.c.checkpointer_indices()
    assert len(elected) == 2, elected
    k = elected[1]
    s.sim.advance(1)
    repo = HubRepo(repo_id="psyche/vec-model", revision="epoch0")
    s.sim.checkpoint(s.client(k), k, HubCheckpoint(repo))
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert s.c.llm.checkpoint == P2PCheckpoint(repo)
    return s


@scenario
def checkpoint_rejected() -> Scenario:
    s = new(
        "checkpoint_rejected",
        "checkpoint errors: outside Cooldown InvalidRunState; in Cooldown a client that is not "
        "elected gets InvalidCheckpoint, an index that is not the sender's or out of range "
        "InvalidCommitteeProof, a Gcs report on a Hub run and a P2P report InvalidCheckpoint. "
        "None of them ends Cooldown; then the elected one succeeds.",
        _short_epochs(),
    )
    s.begin(ids(3))
    hub = HubCheckpoint(HubRepo(repo_id="psyche/vec-model", revision="next"))
    s.sim.checkpoint(s.client(0), 0, hub)
    s.expect(RS.RoundTrain, "InvalidRunState")
    s.rounds_until(RS.Cooldown)
    s.start()
    elected = s.c.checkpointer_indices()
    assert len(elected) == 1
    k = elected[0]
    other = (k + 1) % 3
    s.sim.checkpoint(s.client(other), other, hub)
    s.expect(RS.Cooldown, "InvalidCheckpoint")
    s.sim.checkpoint(s.client(k), other, hub)
    s.expect(RS.Cooldown, "InvalidCommitteeProof")
    s.sim.checkpoint(s.client(k), 9, hub)
    s.expect(RS.Cooldown, "InvalidCommitteeProof")
    s.sim.checkpoint(STRANGER, k, hub)
    s.expect(RS.Cooldown, "InvalidCommitteeProof")
    s.sim.checkpoint(s.client(k), k, GCS)
    s.expect(RS.Cooldown, "InvalidCheckpoint")
    s.sim.checkpoint(s.client(k), k, P2PCheckpoint(HubRepo(repo_id="a/b")))
    s.expect(RS.Cooldown, "InvalidCheckpoint")
    s.sim.checkpoint(s.client(k), k, hub)
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    s.sim.checkpoint(s.client(k), k, hub)
    s.expect(RS.WaitingForMembers, "InvalidRunState")
    return s


@scenario
def checkpoint_on_p2p_run() -> Scenario:
    s = new(
        "checkpoint_on_p2p_run",
        "Second epoch of a run whose checkpoint is now P2P: a Gcs report is recorded as P2PGcs "
        "(the pair table), and Cooldown ends at once; the next Cooldown's Hub report on P2PGcs "
        "becomes P2P again.",
        _multi_epoch_config(),
    )
    _after_first_epoch(s, ids(3))
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    s.start()
    k = s.c.checkpointer_indices()[0]
    gcs = GcsCheckpoint(GcsRepo(bucket="bkt", prefix=None))
    s.sim.checkpoint(s.client(k), k, gcs)
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert type(s.c.llm.checkpoint).TAG == "P2PGcs"
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    k = s.c.checkpointer_indices()[0]
    repo = HubRepo(repo_id="org/model", revision="abc")
    s.sim.checkpoint(s.client(k), k, HubCheckpoint(repo))
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert s.c.llm.checkpoint == P2PCheckpoint(repo)
    return s


@scenario
def checkpoint_with_pending_pause() -> Scenario:
    s = new(
        "checkpoint_with_pending_pause",
        "pause during Cooldown sets pending_pause; the elected checkpointer's report ends "
        "Cooldown early and, because of the pending pause, the run enters Paused.",
        _short_epochs(),
    )
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    s.start()
    s.sim.pause()
    s.expect(RS.Cooldown, "Ok")
    k = s.c.checkpointer_indices()[0]
    s.sim.checkpoint(s.client(k), k, HubCheckpoint(HubRepo(repo_id="psyche/vec-model")))
    s.expect(RS.Paused, "EpochEnd(true)")
    return s


# Health checks


def _silent_plan(s: Scenario, x: int) -> bool:
    """Rounds 0 and 1 normal; client x is silent from round 2 on and elected in neither round 2
    nor round 3 (so every round keeps its witness)."""
    s.begin(ids(4))
    s.round()
    s.round()
    if x in s.witness_of_round():
        return False
    s.sim.silent.add(s.client(x))
    s.round()
    s.expect(RS.RoundTrain)
    return x not in s.witness_of_round()


@scenario
def health_check_rejected() -> Scenario:
    s = new(
        "health_check_rejected",
        "health_check errors: NoActiveRound in WaitingForMembers and Warmup; InvalidHealthCheck "
        "below height 2, for an empty list, from a reporter that is not an epoch client and for a "
        "client the previous round's witnesses saw; InvalidCommitteeProof for a wrong position, "
        "a wrong index and an identity that is not at that index.",
        config(init_min_clients=4),
    )
    s.sim.resume()
    s.start()
    s.sim.health_check(sim_identity(0), [])
    s.expect(RS.WaitingForMembers, "NoActiveRound")
    s.join(ids(4))
    s.sim.health_check(s.client(0), [(s.client(1), CommitteeProof(Committee.Trainer, 0, 1))])
    s.expect(RS.Warmup, "NoActiveRound")
    s.warmup_by_witnesses()
    sel = s.c.committee_selection(s.c.current_round())
    s.sim.health_check(s.client(0), [(s.client(1), sel.get_committee(1))])
    s.expect(RS.RoundTrain, "InvalidHealthCheck")
    s.round()
    s.sim.health_check(s.client(0), [(s.client(1), prev_proof(s, 1))])
    s.expect(RS.RoundTrain, "InvalidHealthCheck")
    s.round()
    assert s.c.current_round().height == 2
    s.sim.health_check(s.client(0), [])
    s.expect(RS.RoundTrain, "InvalidHealthCheck")
    s.sim.health_check(STRANGER, [(s.client(1), prev_proof(s, 1))])
    s.expect(RS.RoundTrain, "InvalidHealthCheck")
    s.sim.health_check(s.client(0), [(s.client(1), prev_proof(s, 1))])
    s.expect(RS.RoundTrain, "InvalidHealthCheck")
    p = prev_proof(s, 2)
    s.sim.health_check(s.client(0), [(s.client(2), CommitteeProof(p.committee, p.position + 1, 2))])
    s.expect(RS.RoundTrain, "InvalidCommitteeProof")
    s.sim.health_check(s.client(0), [(s.client(2), prev_proof(s, 3))])
    s.expect(RS.RoundTrain, "InvalidCommitteeProof")
    s.sim.health_check(s.client(0), [(STRANGER, prev_proof(s, 2))])
    s.expect(RS.RoundTrain, "InvalidCommitteeProof")
    s.sim.health_check(s.client(0), [(s.client(2), CommitteeProof(p.committee, p.position, 4))])
    s.expect(RS.RoundTrain, "InvalidCommitteeProof")
    return s


@scenario
def health_check_ejects_silent_client() -> Scenario:
    s = new(
        "health_check_ejects_silent_client",
        "A client stops delivering results, so the previous round's witness leaves it out of "
        "its participant bloom. A health check with its committee proof (mixed with a healthy "
        "client) is rejected as a whole (InvalidHealthCheck); alone it returns Dropped(1) and "
        "sets it Ejected; a repeat returns Dropped(0). The ejected client cannot witness, and at "
        "the next witness timeout it moves to exited_clients, still Ejected.",
        config(init_min_clients=4),
    )
    x = s.try_plan([3, 2, 1, 0], _silent_plan)
    s.start()
    xid = s.client(x)
    ok = next(i for i in range(4) if i != x)
    s.sim.health_check(s.client(ok), [(xid, prev_proof(s, x)), (s.client(ok), prev_proof(s, ok))])
    s.expect(RS.RoundTrain, "InvalidHealthCheck")
    s.sim.health_check(s.client(ok), [(xid, prev_proof(s, x))])
    s.expect(RS.RoundTrain, "Dropped(1)")
    assert s.c.epoch_state.clients[x].state is ClientState.Ejected
    s.sim.health_check(s.client(ok), [(xid, prev_proof(s, x))])
    s.expect(RS.RoundTrain, "Dropped(0)")
    s.sim.witness(xid, s.sim.round_witness(x))
    s.expect(RS.RoundTrain, "InvalidWitness")
    s.round()
    s.expect(RS.RoundTrain, "Ticked")
    ex = s.c.epoch_state.exited_clients[-1]
    assert ex.id == xid and ex.state is ClientState.Ejected and ex.exited_index == x
    return s


@scenario
def health_check_forged_view_ejects_nobody() -> Scenario:
    s = new(
        "health_check_forged_view_ejects_nobody",
        "witness_nodes = 2 (quorum 2 of 2). In round 2 one elected witness sends empty blooms "
        "and the other an honest witness. In round 3 no trainer is agreed missing by a quorum, "
        "so the honest witness's report of any other client is rejected (InvalidHealthCheck), "
        "and so is a report naming the reporter itself; nobody is ejected.",
        config(init_min_clients=4, witness_nodes=2),
    )
    s.begin(ids(4))
    s.round()
    s.round()
    s.start()
    elected = sorted(s.witness_of_round())
    assert len(elected) == 2
    forger, honest = elected
    sel = s.c.committee_selection(s.c.current_round())
    forged = Witness(sel.get_witness(forger), Bloom.empty(), Bloom.empty())
    s.sim.witness(s.client(forger), forged)
    s.expect(RS.RoundTrain, "Ok")
    s.sim.witness(s.client(honest), s.sim.round_witness(honest))
    s.expect(RS.RoundWitness)
    s.witness_timeout()
    s.expect(RS.RoundTrain)
    for i in range(4):
        s.sim.health_check(s.client(honest), [(s.client(i), prev_proof(s, i))])
        s.expect(RS.RoundTrain, "InvalidHealthCheck")
    assert all(c.state is ClientState.Healthy for c in s.c.epoch_state.clients)
    return s


@scenario
def health_check_incomplete_bloom_ejects_nobody() -> Scenario:
    s = new(
        "health_check_incomplete_bloom_ejects_nobody",
        "witness_nodes = 3 (quorum 2), 5 clients. In round 2 two of the three elected witnesses "
        "report (enough to go on) and one of them missed client y's result (a slow download). y "
        "is seen by one witness and missed by one: below the quorum of sightings, but one missing "
        "vote is not a quorum, so in round 3 a report naming y is rejected (InvalidHealthCheck).",
        config(init_min_clients=5, min_clients=3, witness_nodes=3),
    )
    s.begin(ids(5))
    s.round()
    s.round()
    s.start()
    elected = sorted(s.witness_of_round())
    assert len(elected) == 3
    full, partial = elected[0], elected[1]
    y = next(i for i in range(5) if i not in (full, partial))
    s.sim.witness(s.client(full), s.sim.round_witness(full))
    s.sim.silent.add(s.client(y))
    s.sim.witness(s.client(partial), s.sim.round_witness(partial))
    s.sim.silent.discard(s.client(y))
    s.expect(RS.RoundTrain, "Ok")
    s.train_timeout()
    s.witness_timeout()
    s.expect(RS.RoundTrain)
    assert not s.c.trainer_healthy(s.client(y))
    s.sim.health_check(s.client(full), [(s.client(y), prev_proof(s, y))])
    s.expect(RS.RoundTrain, "InvalidHealthCheck")
    assert all(c.state is ClientState.Healthy for c in s.c.epoch_state.clients)
    return s


@scenario
def health_check_agreeing_witnesses_eject() -> Scenario:
    s = new(
        "health_check_agreeing_witnesses_eject",
        "witness_nodes = 2 (quorum 2). A client is silent from round 2 and both of round 2's "
        "witnesses leave it out: a report naming it returns Dropped(1); a report naming the "
        "reporter itself is rejected (InvalidHealthCheck).",
        config(init_min_clients=4, witness_nodes=2),
    )
    x = s.try_plan([3, 2, 1, 0], _silent_plan)
    s.start()
    ok = next(i for i in range(4) if i != x)
    s.sim.health_check(s.client(ok), [(s.client(ok), prev_proof(s, ok))])
    s.expect(RS.RoundTrain, "InvalidHealthCheck")
    s.sim.health_check(s.client(ok), [(s.client(x), prev_proof(s, x))])
    s.expect(RS.RoundTrain, "Dropped(1)")
    assert s.c.epoch_state.clients[x].state is ClientState.Ejected
    return s


def _middle_plan(s: Scenario, pair: tuple[int, int]) -> bool:
    """5 clients; in round 2 client m withdraws and client x (after m) goes silent; neither may
    be round 2's witness, and x must not be round 3's."""
    m, x = pair
    s.begin(ids(5))
    s.round()
    s.round()
    if s.witness_of_round() & {m, x}:
        return False
    s.sim.withdraw(m)
    s.sim.silent.add(s.client(x))
    s.round()
    s.expect(RS.RoundTrain)
    return x - 1 not in s.witness_of_round()


@scenario
def health_check_after_middle_client_left() -> Scenario:
    s = new(
        "health_check_after_middle_client_left",
        "A client from the middle of the list withdraws in round 2 and leaves at its witness "
        "timeout, so the indices after it shift down by one in round 3. The health check in "
        "round 3 is judged against round 2's list, rebuilt exactly from exited_index (our "
        "deviation): the silent client's round-2 index is accepted (Dropped(1)), its new index "
        "is an InvalidCommitteeProof.",
        config(init_min_clients=5, min_clients=2),
    )
    m, x = s.try_plan([(1, 3), (1, 4), (2, 4), (0, 4), (0, 3), (2, 3)], _middle_plan)
    s.start()
    new_x = x - 1
    xid = s.client(new_x)
    reporter = s.client(0 if m != 0 else 1)
    prev = s.c.previous_round()
    assert prev is not None and prev.clients_len == 5 and len(s.c.epoch_state.clients) == 4
    s.sim.health_check(reporter, [(xid, prev_proof(s, new_x))])
    s.expect(RS.RoundTrain, "InvalidCommitteeProof")
    s.sim.health_check(reporter, [(xid, prev_proof(s, x))])
    s.expect(RS.RoundTrain, "Dropped(1)")
    assert s.c.epoch_state.clients[new_x].state is ClientState.Ejected
    return s


# No lost work (docs/protocol.md): intervals of ejected and leaving clients are queued in
# epoch_state.lost and re-assigned in later rounds as round.retries.


def assignment_now(s: Scenario) -> dict[BatchId, NodeIdentity]:
    """The current round's assignment from its live client list (all still listed while the
    round runs), computed here independently of the coordinator's lost-work code."""
    c = s.c
    rnd = c.current_round()
    assert rnd.clients_len == len(c.epoch_state.clients)
    return assign_data_for_state(
        [x.id for x in c.epoch_state.clients],
        c.committee_selection(rnd),
        rnd.data_index,
        c.batch_size_for_round(rnd),
        rnd.random_seed,
        rnd.retries,
    )


def batch_of(assignment: dict[BatchId, NodeIdentity], who: NodeIdentity) -> BatchId:
    return next(b for b, node in assignment.items() if node == who)


def _size(batches: Sequence[BatchId]) -> int:
    return sum(b.size for b in batches)


def _ejected_plan(s: Scenario, pair: tuple[int, int]) -> bool:
    """4 clients, batch 6. Client x (never a witness while silent) stops delivering in round 2;
    the health check in round 3 ejects it; client w withdraws in round 4."""
    x, w = pair
    s.begin(ids(4))
    a = [assignment_now(s)]
    for _ in range(2):
        s.round()
        a.append(assignment_now(s))
    if x in s.witness_of_round():
        return False
    xid = s.client(x)
    s.sim.silent.add(xid)
    s.round()
    s.expect(RS.RoundTrain)
    a.append(assignment_now(s))
    if x in s.witness_of_round():
        return False
    s.start()
    es = s.c.epoch_state
    reporter = s.client(next(i for i in range(4) if i != x))
    s.sim.health_check(reporter, [(xid, prev_proof(s, x))])
    s.expect(RS.RoundTrain, "Dropped(1)")
    lost_1 = batch_of(a[1], xid)
    assert es.lost == [lost_1], es.lost
    d3 = s.c.current_round().data_index
    s.round()
    s.expect(RS.RoundTrain, "Ticked")
    lost_2, lost_3 = batch_of(a[2], xid), batch_of(a[3], xid)
    assert es.exited_clients[-1].id == xid
    # Round 4: 3 clients → at most 2 retries, both fit the batch of 6.
    rnd = s.c.current_round()
    assert rnd.retries == [lost_1, lost_2] and es.lost == [lost_3], (rnd.retries, es.lost)
    assert rnd.data_index == d3 + 6
    a.append(assignment_now(s))
    first = deterministic_shuffle([c.id for c in es.clients], rnd.random_seed)
    assert [a[4][lost_1], a[4][lost_2]] == first[:2]
    if w >= len(es.clients) or w in s.witness_of_round():
        return False
    wid = s.client(w)
    s.sim.withdraw(w)
    s.expect(RS.RoundTrain, "Ok")
    d4 = rnd.data_index
    s.round()
    s.expect(RS.RoundTrain, "Ticked")
    # w delivered round 3 (attested by round 4's witness): only its round-4 interval is queued.
    lost_4 = batch_of(a[4], wid)
    rnd = s.c.current_round()
    assert rnd.retries == [lost_3] and es.lost == [lost_4], (rnd.retries, es.lost)
    assert rnd.data_index == d4 + 6 - _size([lost_1, lost_2])
    d5 = rnd.data_index
    s.round()
    s.expect(RS.RoundTrain, "Ticked")
    rnd = s.c.current_round()
    assert rnd.retries == [lost_4] and es.lost == []
    assert rnd.data_index == d5 + 6 - lost_3.size
    d6 = rnd.data_index
    s.round()
    s.expect(RS.RoundTrain, "Ticked")
    rnd = s.c.current_round()
    assert rnd.retries == [] and rnd.data_index == d6 + 6 - lost_4.size
    return True


@scenario
def lost_work_ejected_client_retried() -> Scenario:
    s = new(
        "lost_work_ejected_client_retried",
        "4 clients, batch 6. Client x stops delivering in round 2 (round 2's witness does not see "
        "its round-1 result). The health check in round 3 ejects it and queues its round-1 "
        "interval in epoch_state.lost; at round 3's witness timeout it leaves and queues its "
        "round-2 interval (round 3's witness did not attest it) and its round-3 interval. Round 4 "
        "(3 clients: at most n-1 = 2 retries) re-assigns the first two to its first two shuffled "
        "trainers; client w withdraws in round 4 and leaves at its timeout: its round-3 result "
        "was attested, so only its round-4 interval is queued. Rounds 5 (2 clients: 1 retry) "
        "and 6 take the rest; each round's data_index advances only by the previous round's "
        "fresh samples (batch size minus retried samples).",
        config(init_min_clients=4),
    )
    cands = [(x, w) for x in (3, 2, 1, 0) for w in range(3)]
    s.try_plan(cands, _ejected_plan)
    return s


def _bounds_plan(s: Scenario, _: int) -> bool:
    """42 clients, batch 84 (2 samples each); 33 go silent and withdraw in round 1."""
    s.begin(ids(42))
    s.round()
    w = s.elected_witness()
    leaving = [i for i in range(42) if i != w][:33]
    ids_before = [c.id for c in s.c.epoch_state.clients]
    cur = assignment_now(s)
    prev_rnd = s.c.previous_round()
    assert prev_rnd is not None
    prev = assign_data_for_state(
        ids_before,
        s.c.committee_selection(prev_rnd),
        prev_rnd.data_index,
        s.c.batch_size_for_round(prev_rnd),
        prev_rnd.random_seed,
    )
    for i in leaving:
        s.sim.silent.add(ids_before[i])
        s.sim.withdraw(i)
    s.start()
    es = s.c.epoch_state
    s.round()
    s.expect(RS.RoundTrain, "Ticked")
    # 33 leaving clients queue 2 intervals each (round 0 unattested, round 1): 64 kept.
    want = [batch_of(a, ids_before[i]) for i in leaving for a in (prev, cur)]
    rnd = s.c.current_round()
    assert len(es.clients) == 9 and len(want) == 66
    assert rnd.retries == want[:8] and es.lost == want[8:64], (rnd.retries, es.lost)
    d2 = rnd.data_index
    # 6 more withdraw (still delivering): only their round-2 intervals are queued.
    w2 = s.elected_witness()
    a2 = assignment_now(s)
    more = [i for i in range(9) if i != w2][:6]
    more_ids = [s.client(i) for i in more]
    for i in more:
        s.sim.withdraw(i)
    s.round()
    s.expect(RS.RoundTrain, "Ticked")
    rnd = s.c.current_round()
    assert len(es.clients) == 3
    assert rnd.retries == want[8:10], rnd.retries
    assert es.lost == want[10:64] + [batch_of(a2, who) for who in more_ids]
    assert rnd.data_index == d2 + 84 - 16
    return True


@scenario
def lost_work_queue_and_round_bounds() -> Scenario:
    s = new(
        "lost_work_queue_and_round_bounds",
        "42 clients, batch 84 (2 samples each). In round 1, 33 clients stop delivering and "
        "withdraw; at round 1's witness timeout each queues its round-0 interval (not attested) "
        "and its round-1 interval, in client order: 66 intervals, of which the queue keeps 64 "
        "(the last two are dropped). Round 2 (9 clients) takes 8 retries, the per-round bound; "
        "then 6 more clients withdraw, queueing only their round-2 intervals (their round-1 "
        "results were attested), and round 3 (3 clients) takes n-1 = 2.",
        config(
            init_min_clients=42,
            global_batch_size_start=84,
            global_batch_size_end=84,
        ),
    )
    s.try_plan([0], _bounds_plan)
    return s


def _carry_plan(s: Scenario, cand: tuple[int, int]) -> bool:
    """2 clients, batch 6 (3 each). Client y goes silent in round r ≥ 1 and is ejected, then
    leaves at the next timeout, which ends the epoch at once (1 < min_clients)."""
    y, r = cand
    s.begin(ids(2))
    a = [assignment_now(s)]
    for _ in range(r):
        s.round()
        a.append(assignment_now(s))
    if y in s.witness_of_round():
        return False
    yid = s.client(y)
    s.sim.silent.add(yid)
    s.round()
    s.expect(RS.RoundTrain)
    a.append(assignment_now(s))
    if y in s.witness_of_round():
        return False
    s.start()
    es = s.c.epoch_state
    h = s.c.current_round().height
    s.sim.health_check(s.client(1 - y), [(yid, prev_proof(s, y))])
    s.expect(RS.RoundTrain, "Dropped(1)")
    d = s.c.current_round().data_index
    s.round()
    s.expect(RS.Cooldown, "Ticked")
    want = [batch_of(a[h - 2], yid), batch_of(a[h - 1], yid), batch_of(a[h], yid)]
    assert es.lost == want and [b.size for b in want] == [3, 3, 3], es.lost
    s.cooldown_timeout()
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert s.c.progress.epoch_start_data_index == d + 6
    assert s.c.epoch_state.lost == want
    s.begin(ids(4, first=10))
    es = s.c.epoch_state
    # 4 clients allow 3 retries, but the third would exceed the batch of 6: fresh = 0.
    rnd = s.c.current_round()
    assert rnd.data_index == d + 6 and rnd.retries == want[:2] and es.lost == want[2:]
    assert sorted(assignment_now(s)) == sorted(want[:2])
    s.round()
    rnd = s.c.current_round()
    assert rnd.data_index == d + 6 and rnd.retries == want[2:] and es.lost == []
    s.round()
    rnd = s.c.current_round()
    assert rnd.data_index == d + 9 and rnd.retries == []
    return True


@scenario
def lost_work_carried_into_next_epoch() -> Scenario:
    s = new(
        "lost_work_carried_into_next_epoch",
        "2 clients, batch 6 (3 samples each). Client y stops delivering; the health check "
        "ejects it (queueing its interval of the round checked) and it leaves at the next "
        "witness timeout (queueing its last two intervals), which ends the epoch at once "
        "(1 < min_clients). The queue survives Cooldown and the new epoch: its round 0 "
        "(4 clients, so up to 3 retries) takes the first two (6 samples: no fresh samples, "
        "data_index of round 1 equals round 0's), the third would exceed the batch; round 1 "
        "takes it and 3 fresh samples.",
        config(init_min_clients=2),
    )
    s.try_plan([(y, r) for r in (1, 2, 3, 4) for y in (1, 0)], _carry_plan)
    return s


# withdraw


@scenario
def withdraw_ok_and_invalid() -> Scenario:
    s = new(
        "withdraw_ok_and_invalid",
        "withdraw marks a healthy client Withdrawn (it stays listed until the next boundary); "
        "withdrawing it again, an index past the list, or any index while no client is listed "
        "gives InvalidWithdraw.",
    )
    s.sim.resume()
    s.start()
    s.sim.withdraw(0)
    s.expect(RS.WaitingForMembers, "InvalidWithdraw")
    s.begin(ids(3))
    gone = s.non_witness()
    s.sim.withdraw(gone)
    s.expect(RS.RoundTrain, "Ok")
    s.sim.withdraw(gone)
    s.expect(RS.RoundTrain, "InvalidWithdraw")
    s.sim.withdraw(3)
    s.expect(RS.RoundTrain, "InvalidWithdraw")
    s.round()
    assert len(s.c.epoch_state.clients) == 2
    s.sim.withdraw(2)
    s.expect(RS.RoundTrain, "InvalidWithdraw")
    return s


# pause / resume / halted


def _all_handlers(s: Scenario, who: NodeIdentity) -> None:
    s.sim.tick([who])
    s.sim.warmup_witness(who, empty_witness(0))
    s.sim.witness(who, empty_witness(0, witness=True))
    s.sim.health_check(who, [(who, CommitteeProof(Committee.Trainer, 0, 0))])
    s.sim.checkpoint(who, 0, HUB)
    s.sim.pause()


@scenario
def pause_in_waiting_for_members() -> Scenario:
    s = new(
        "pause_in_waiting_for_members",
        "pause in WaitingForMembers enters Paused at once with cold_start_epoch set and every "
        "listed client (the previous epoch's survivors) withdrawn. While Paused every handler "
        "returns Halted (tick, warmup_witness, witness, health_check, checkpoint, pause); resume "
        "returns to WaitingForMembers.",
        _short_epochs(),
    )
    _after_first_epoch(s, ids(3))
    s.start()
    s.sim.pause()
    s.expect(RS.Paused, "Ok")
    assert s.c.epoch_state.cold_start_epoch
    assert all(c.state is ClientState.Withdrawn for c in s.c.epoch_state.clients)
    n = len(s.sim.events)
    _all_handlers(s, sim_identity(0))
    assert all(e.get("error") == "Halted" for e in s.sim.events[n:])
    s.sim.withdraw(0)
    s.expect(RS.Paused, "InvalidWithdraw")
    s.sim.advance(3)
    s.sim.resume()
    s.expect(RS.WaitingForMembers, "Ok")
    return s


@scenario
def pause_in_warmup() -> Scenario:
    s = new(
        "pause_in_warmup",
        "pause in Warmup (one of two warmup witnesses stored) withdraws every client and enters "
        "Paused at once with cold_start_epoch.",
        config(witness_nodes=2),
    )
    s.join(ids(3))
    s.sim.send_warmup_witnesses(1)
    s.start()
    s.sim.pause()
    s.expect(RS.Paused, "Ok")
    assert s.c.epoch_state.cold_start_epoch
    return s


@scenario
def pause_in_cooldown() -> Scenario:
    s = new(
        "pause_in_cooldown",
        "pause in Cooldown sets pending_pause; Cooldown's timeout then enters Paused "
        "(EpochEnd(true)) with every client withdrawn and cold_start_epoch set.",
        _short_epochs(),
    )
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    s.start()
    s.sim.pause()
    s.expect(RS.Cooldown, "Ok")
    s.cooldown_timeout()
    s.expect(RS.Paused, "EpochEnd(true)")
    assert s.c.epoch_state.cold_start_epoch
    return s


@scenario
def resume_rejected() -> Scenario:
    s = new(
        "resume_rejected",
        "resume from anything but Paused and Uninitialized gives CannotResume: WaitingForMembers, "
        "Warmup, RoundTrain, RoundWitness, Cooldown.",
        _short_epochs(),
    )
    s.sim.resume()
    s.start()
    s.sim.resume()
    s.expect(RS.WaitingForMembers, "CannotResume")
    s.join(ids(3))
    s.sim.resume()
    s.expect(RS.Warmup, "CannotResume")
    s.warmup_by_witnesses()
    s.sim.resume()
    s.expect(RS.RoundTrain, "CannotResume")
    s.sim.send_round_witnesses()
    s.sim.resume()
    s.expect(RS.RoundWitness, "CannotResume")
    s.witness_timeout()
    s.rounds_until(RS.Cooldown)
    s.sim.resume()
    s.expect(RS.Cooldown, "CannotResume")
    return s


@scenario
def uninitialized_halted_then_resume() -> Scenario:
    s = new(
        "uninitialized_halted_then_resume",
        "An Uninitialized run (here with progress.step 7 from an earlier configuration) rejects "
        "every handler with Halted (withdraw: InvalidWithdraw, nobody is listed); resume resets "
        "the step to 1 and waits for members.",
    )
    s.c.progress.step = 7
    s.start()
    _all_handlers(s, sim_identity(0))
    assert all(e.get("error") == "Halted" for e in s.sim.events)
    s.sim.withdraw(0)
    s.expect(RS.Uninitialized, "InvalidWithdraw")
    s.sim.resume()
    s.expect(RS.WaitingForMembers, "Ok")
    assert s.c.progress.step == 1
    return s


@scenario
def uninitialized_resume_total_steps_one() -> Scenario:
    s = new(
        "uninitialized_resume_total_steps_one",
        "With total_steps = 1, resume from Uninitialized sets step 1, which already reaches "
        "total_steps: the run goes straight to Finished.",
        config(total_steps=1),
    )
    s.start()
    s.sim.resume()
    s.expect(RS.Finished, "Ok")
    return s


@scenario
def finished_halted() -> Scenario:
    s = new(
        "finished_halted",
        "A Finished run rejects tick and every message handler with Halted and resume with "
        "CannotResume. withdraw has no run-state check: the last epoch's clients are still "
        "listed and can be withdrawn.",
        config(total_steps=3),
    )
    s.begin(ids(3))
    s.rounds_until(RS.Cooldown)
    s.cooldown_timeout()
    s.expect(RS.Finished, "EpochEnd(true)")
    s.start()
    _all_handlers(s, s.client(0))
    assert all(e.get("error") == "Halted" for e in s.sim.events)
    s.sim.resume()
    s.expect(RS.Finished, "CannotResume")
    s.sim.withdraw(0)
    s.expect(RS.Finished, "Ok")
    return s


# Multi-epoch runs


@scenario
def multi_epoch_rejoin_and_new_client() -> Scenario:
    s = new(
        "multi_epoch_rejoin_and_new_client",
        "Two epochs recorded from Uninitialized. Epoch 0: three clients, warmup witness, rounds "
        "until the epoch timeout and two drain rounds, Cooldown ends by timeout (Hub → P2P). "
        "Epoch 1: two of them rejoin with a new client (P2P kept, the new client is listed "
        "second); the epoch continues at the next data index and step.",
        _multi_epoch_config(),
    )
    s.start()
    _after_first_epoch(s, ids(3))
    end0 = s.c.progress.epoch_start_data_index
    step0 = s.c.progress.step
    s.begin([sim_identity(2), sim_identity(7), sim_identity(0)])
    assert isinstance(s.c.llm.checkpoint, P2PCheckpoint)
    assert s.c.current_round().data_index == end0 and s.c.epoch_state.start_step == step0
    s.rounds_until(RS.Cooldown)
    s.cooldown_timeout()
    s.expect(RS.WaitingForMembers, "EpochEnd(true)")
    assert s.c.progress.epoch == 2
    return s


@scenario
def multi_epoch_three_epochs() -> Scenario:
    s = new(
        "multi_epoch_three_epochs",
        "Three short epochs, each ended early by the elected checkpointer's report. Epoch 1 adds "
        "a fourth client; one client withdraws during epoch 1's first round, leaves at its "
        "witness timeout (queueing its round-0 interval as lost work; epoch 1's other rounds "
        "drain, so epoch 2's round 0 re-assigns it) and does not come back for epoch 2.",
        config(
            epoch_time=6,
            warmup_time=3,
            max_round_train_time=3,
            round_witness_time=6,
            cooldown_time=3,
            waiting_for_members_extra_time=1,
        ),
    )
    s.sim.resume()
    s.start()
    pending = ids(3)
    for epoch in range(3):
        s.sim.advance(1)
        s.sim.tick(pending)
        s.expect(RS.Warmup, "Ticked")
        s.warmup_by_witnesses()
        gone: NodeIdentity | None = None
        if epoch == 1:
            i = next(i for i in range(4) if i not in s.witness_of_round())
            gone = s.client(i)
            s.sim.withdraw(i)
        s.rounds_until(RS.Cooldown)
        k = s.c.checkpointer_indices()[0]
        repo = HubRepo(repo_id="o/m", revision=f"e{epoch}")
        s.sim.checkpoint(s.client(k), k, HubCheckpoint(repo))
        s.expect(RS.WaitingForMembers, "EpochEnd(true)")
        pending = [*ids(3), sim_identity(3)] if epoch == 0 else [*pending]
        if gone is not None:
            pending.remove(gone)
    assert s.c.progress.epoch == 3
    return s


# States that honest play never reaches (crafted initial states), for the remaining error codes.


@scenario
def crafted_witnesses_full() -> Scenario:
    s = new(
        "crafted_witnesses_full",
        "A crafted, unvalidated config with witness_nodes = 40 (> 32): in Warmup with 33 clients "
        "and 32 stored warmup witnesses, the 33rd gives WitnessesFull.",
        config(),
    )
    s.c.config = _unchecked(config(), witness_nodes=40, init_min_clients=33, min_clients=33)
    s.join(ids(33))
    for i in range(32):
        s.sim.warmup_witness(s.client(i), empty_witness(i))
    s.expect(RS.Warmup, "Ok")
    s.start()
    s.sim.warmup_witness(s.client(32), empty_witness(32))
    s.expect(RS.Warmup, "WitnessesFull")
    return s


@scenario
def crafted_invalid_committee_selection() -> Scenario:
    s = new(
        "crafted_invalid_committee_selection",
        "A crafted state whose current round has clients_len 1 while witness_nodes is 2: "
        "the committee selection cannot be built and witness gives InvalidCommitteeSelection.",
        config(witness_nodes=2),
    )
    s.begin(ids(3))
    s.c.current_round().clients_len = 1
    s.start()
    s.sim.witness(s.client(0), empty_witness(0, witness=True))
    s.expect(RS.RoundTrain, "InvalidCommitteeSelection")
    return s


def _unchecked(cfg: CoordinatorConfig, **changes: int) -> CoordinatorConfig:
    values = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    values.update(changes)
    return CoordinatorConfig(**values)


# Result verification (docs/protocol.md, "Threat model and result verification"). Written to
# ``verification/``: the Rust program does not replay these yet.

VERIFICATION_SCENARIOS: list[Callable[[], Scenario]] = []


def verification_scenario(fn: Callable[[], Scenario]) -> Callable[[], Scenario]:
    VERIFICATION_SCENARIOS.append(fn)
    return fn


def new_verifying(name: str, description: str, vp: int, **overrides: int) -> Scenario:
    """A scenario whose config samples ``vp`` percent of results. Set after validation: the
    client's verifier step does not exist yet, so ``check()`` still requires 0."""
    s = new(name, description, config(**overrides))
    s.c.config = _unchecked(s.c.config, verification_percent=vp)
    return s


def judged_now(s: Scenario) -> tuple[list[NodeIdentity], list[int]]:
    """The previous round's client list and its sampled indices (slot order)."""
    prev = s.c.previous_round()
    assert prev is not None
    return s.c.round_clients(prev), s.c.judged_sample(s.c.current_round(), prev)


def verifier_indices(s: Scenario) -> list[int]:
    rnd = s.c.current_round()
    sel = s.c.committee_selection(rnd)
    return [
        i
        for i in range(rnd.clients_len)
        if sel.get_witness(i).witness and sel.get_witness(i).position < VERIFIERS_PER_ROUND
    ]


def send_judging_witness(s: Scenario, index: int, verdict: Verdict | None = None) -> None:
    w = s.sim.round_witness(index)
    if verdict is not None:
        w = dataclasses.replace(w, verdict=verdict)
    s.sim.witness(s.client(index), w)


def until_judging(s: Scenario, fits: Callable[[NodeIdentity, list[int]], bool]) -> NodeIdentity:
    """Play honest rounds until one (height ≥ 1) whose sampled trainer and verifier indices fit;
    returns the sampled trainer."""
    for _ in range(12):
        if s.c.current_round().height >= 1:
            judged, sampled = judged_now(s)
            if sampled and fits(judged[sampled[0]], verifier_indices(s)):
                return judged[sampled[0]]
        s.round()
    raise AssertionError(f"{s.name}: no round fits")


MISMATCH = Verdict(checked=1, mismatch=1)
MATCH = Verdict(checked=1, mismatch=0)


@verification_scenario
def verify_quorum_rejects_trainer() -> Scenario:
    s = new_verifying(
        "verify_quorum_rejects_trainer",
        "verification_percent 25 of 4 clients samples one result per round (slot 0), judged by "
        "the 3 verifier witnesses of the next round (quorum 2). Two of them find a mismatch, "
        "the third a match: at the RoundWitness end the trainer is Ejected, leaves, and its "
        "interval of the judged round and of the judging round are queued and retried.",
        25,
        init_min_clients=4,
        min_clients=3,
        witness_nodes=3,
    )
    s.begin(ids(4))
    s.round()
    s.start()
    judged, sampled = judged_now(s)
    trainer = judged[sampled[0]]
    voters = [i for i in verifier_indices(s) if s.client(i) != trainer]
    for n, i in enumerate(voters):
        send_judging_witness(s, i, MISMATCH if n < 2 else MATCH)
    for i in sorted(s.witness_of_round() - set(voters)):
        send_judging_witness(s, i)
    s.expect(RS.RoundWitness)
    s.witness_timeout()
    s.expect(RS.RoundTrain, "Ticked")
    assert s.c.index_of(trainer) is None
    assert s.c.epoch_state.exited_clients[-1].state is ClientState.Ejected
    assert s.c.current_round().retries, "the rejected interval is retried"
    s.round()
    return s


@verification_scenario
def verify_lone_accuser_ejected() -> Scenario:
    s = new_verifying(
        "verify_lone_accuser_ejected",
        "5 clients, 3 verifier witnesses (quorum 2), none of them the sampled trainer: one "
        "verifier votes mismatch, two vote match. The accused keeps its place; the accuser is "
        "Ejected at the RoundWitness end and leaves.",
        20,
        init_min_clients=5,
        min_clients=3,
        witness_nodes=3,
    )
    s.begin(ids(5))
    trainer = until_judging(s, lambda t, v: all(s.client(i) != t for i in v))
    s.start()
    voters = verifier_indices(s)
    accuser = s.client(voters[0])
    for n, i in enumerate(voters):
        send_judging_witness(s, i, MISMATCH if n == 0 else MATCH)
    s.expect(RS.RoundWitness)
    s.witness_timeout()
    s.expect(RS.RoundTrain, "Ticked")
    assert s.c.index_of(trainer) is not None
    assert s.c.index_of(accuser) is None
    assert s.c.epoch_state.exited_clients[-1].id == accuser
    return s


@verification_scenario
def verify_split_and_silent_decide_nothing() -> Scenario:
    s = new_verifying(
        "verify_split_and_silent_decide_nothing",
        "5 clients, 3 verifiers, none the sampled trainer. One votes mismatch, one match, the "
        "third sends no witness (silent): no side reaches the quorum of 2, the round ends by its "
        "train timeout and nobody is ejected. Then a trainer that withdrew in the judging round "
        "is still Ejected by a mismatch quorum.",
        20,
        init_min_clients=5,
        min_clients=3,
        witness_nodes=3,
    )
    s.begin(ids(5))
    until_judging(s, lambda t, v: all(s.client(i) != t for i in v))
    s.start()
    voters = verifier_indices(s)
    send_judging_witness(s, voters[0], MISMATCH)
    send_judging_witness(s, voters[1], MATCH)
    s.train_timeout()
    s.witness_timeout()
    s.expect(RS.RoundTrain, "Ticked")
    assert len(s.c.epoch_state.clients) == 5
    trainer = until_judging(s, lambda t, v: sum(s.client(i) != t for i in v) >= 2)
    s.sim.withdraw(s.c.index_of(trainer))
    voters = [i for i in verifier_indices(s) if s.client(i) != trainer]
    for i in voters:
        send_judging_witness(s, i, MISMATCH)
    if s.state is RS.RoundTrain:
        s.train_timeout()
    s.witness_timeout()
    assert s.c.epoch_state.exited_clients[-1].id == trainer
    assert s.c.epoch_state.exited_clients[-1].state is ClientState.Ejected
    return s


@verification_scenario
def verify_verdict_rejected() -> Scenario:
    s = new_verifying(
        "verify_verdict_rejected",
        "Witnesses whose verdict is not allowed are rejected (InvalidWitness) and change "
        "nothing: a verdict in round 0 (nothing to judge), from a witness at position 3 (not a "
        "verifier), on slot 1 when one result is sampled, a mismatch bit without its checked "
        "bit, and a verifier judging its own result. Then the same witnesses without a verdict "
        "are accepted.",
        20,
        init_min_clients=5,
        min_clients=4,
        witness_nodes=4,
    )
    s.begin(ids(5))
    s.start()
    first = verifier_indices(s)[0]
    send_judging_witness(s, first, MATCH)
    s.expect(RS.RoundTrain, "InvalidWitness")
    s.round()
    trainer = until_judging(s, lambda t, v: any(s.client(i) == t for i in v))
    sel = s.c.committee_selection(s.c.current_round())
    fourth = next(i for i in s.witness_of_round() if sel.get_witness(i).position == 3)
    own = s.c.index_of(trainer)
    assert own is not None
    other = next(i for i in verifier_indices(s) if i != own)
    send_judging_witness(s, fourth, MATCH)
    s.expect(RS.RoundTrain, "InvalidWitness")
    send_judging_witness(s, other, Verdict(checked=2, mismatch=0))
    s.expect(RS.RoundTrain, "InvalidWitness")
    send_judging_witness(s, other, Verdict(checked=0, mismatch=1))
    s.expect(RS.RoundTrain, "InvalidWitness")
    send_judging_witness(s, own, MATCH)
    s.expect(RS.RoundTrain, "InvalidWitness")
    send_judging_witness(s, own)
    s.expect(RS.RoundTrain, "Ok")
    send_judging_witness(s, other, MATCH)
    s.expect(RS.RoundTrain, "Ok")
    return s


# --- output -------------------------------------------------------------------------------------


def build(scenarios: Sequence[Callable[[], Scenario]] | None = None) -> dict[str, object]:
    """File name → JSON object for every scenario (``SCENARIOS`` unless given)."""
    out: dict[str, object] = {}
    for fn in SCENARIOS if scenarios is None else scenarios:
        s = fn()
        obj = s.to_obj()
        name = f"{s.name}.json"
        assert name not in out, f"duplicate scenario name {s.name}"
        out[name] = obj
    return out


VERDICT_ERRORS = {
    "only a verifier witness carries a verdict": "NotVerifier",
    "a mismatch bit without its checked bit": "MismatchWithoutChecked",
    "a verifier cannot judge its own result": "OwnResult",
}


def _verdict_code(why: str | None) -> str | None:
    if why is None:
        return None
    if why.startswith("verdict names a slot beyond"):
        return "SlotNotSampled"
    return VERDICT_ERRORS[why]


def verification_rules() -> dict[str, object]:
    """The pure verification rules on plain values, for the Rust unit that mirrors them
    (``programs/psyche-coordinator/tests/vectors_verification.rs``): sampling, verdict
    validation and the quorum decision."""
    sampling = []
    for n, seed, vp in [(1, 1, 100), (4, 7, 25), (4, 7, 26), (10, 99, 1), (64, 12345, 25),
                        (256, 2**64 - 1, 100), (5, 0, 0), (3, 42, 50)]:  # fmt: skip
        sampling.append({"n": n, "seed": seed, "vp": vp, "sampled": sampled_trainers(n, seed, vp)})
    errors = []
    for checked, mismatch, verifier, n_sampled, own in [
        (0, 0, False, 0, 0), (1, 0, True, 1, 0), (1, 1, True, 1, 0), (1, 0, False, 1, 0),
        (0, 1, True, 1, 0), (2, 0, True, 1, 0), (1, 0, True, 0, 0), (1, 0, True, 2, 1),
        (2, 2, True, 2, 1), (0xFFFF, 0, True, 16, 0), (0xFFFF, 0x8000, True, 15, 0),
    ]:  # fmt: skip
        own_slots = [p for p in range(16) if own >> p & 1]
        why = verdict_error(Verdict(checked, mismatch), verifier, n_sampled, own_slots)
        errors.append({"checked": checked, "mismatch": mismatch, "verifier": verifier,
                       "n_sampled": n_sampled, "own_slots": own,
                       "error": _verdict_code(why)})  # fmt: skip
    judged = [sim_identity(100 + i) for i in range(16)]
    cases = [
        ([(0, 1, 1), (1, 1, 1), (2, 1, 0)], 1, 3),
        ([(0, 1, 1), (1, 1, 0), (2, 1, 0)], 1, 3),
        ([(0, 1, 1), (1, 1, 0)], 1, 3),
        ([(0, 1, 1), (3, 1, 1)], 1, 3),
        ([(0, 1, 1)], 1, 1),
        ([(0, 0b11, 0b01), (1, 0b11, 0b10), (2, 0b11, 0b01)], 2, 3),
        ([(1, 0b101, 0b100), (0, 0b101, 0b100), (2, 0b001, 0)], 3, 3),
    ]
    judge_cases = []
    for votes, n_sampled, n_verifiers in cases:
        witnesses = [
            Witness(WitnessProof(pos, i, True), Bloom.empty(), Bloom.empty(), Verdict(c, m))
            for i, (pos, c, m) in enumerate(votes)
        ]
        voters = [sim_identity(200 + i) for i in range(len(votes))]
        out = judge(witnesses, voters, judged, list(range(n_sampled)), n_verifiers)
        judge_cases.append({
            "votes": [{"position": p, "checked": c, "mismatch": m} for p, c, m in votes],
            "n_sampled": n_sampled,
            "n_verifiers": n_verifiers,
            "rejected": sum(1 << p for p in range(n_sampled) if judged[p] in out.rejected),
            "accused": [v in out.false_accusers for v in voters],
        })  # fmt: skip
    return {"sampling": sampling, "verdict_error": errors, "judge": judge_cases}


def write(out_dir: Path, files: dict[str, object]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.json"):
        if old.name not in files:
            old.unlink()
    total = 0
    for name, obj in files.items():
        text = dumps(obj)
        (out_dir / name).write_text(text, encoding="utf-8")
        total += len(text)
    print(f"wrote {len(files)} scenarios, {total} bytes, to {out_dir}", file=sys.stderr)


def main() -> None:
    write(OUT_DIR, build())
    write(VERIFICATION_DIR, build(VERIFICATION_SCENARIOS))
    write(VERIFICATION_DIR / "rules", {"rules.json": verification_rules()})


if __name__ == "__main__":
    main()
