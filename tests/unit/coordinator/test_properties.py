"""Property tests: random event sequences against the coordinator keep its invariants.

A hypothesis strategy draws a small valid config and a list of abstract actions (ticks with
random time steps and pending lists, honest and corrupted witnesses, warmup witnesses with
random indices, withdrawals, pauses, resumes, health checks, checkpoints). Each action is turned
into a concrete call against the current state, so sequences reach every phase. After every call:

* only CoordinatorException may be raised, and a rejected call leaves the state untouched;
* 0 ≤ len(clients) ≤ 256, every round holds ≤ 32 witnesses, stored witness indices are in range
  and distinct, client identities are distinct;
* step and epoch never decrease;
* the run state moves only along ALLOWED_EDGES;
* consecutive rounds cover contiguous, disjoint data ranges (also across epochs);
* in RoundTrain/RoundWitness, ``clients_len`` equals the client count and, from height 2 on (where
  health checks use it), ``previous_round_clients()`` equals the list recorded when the previous
  round started;
* to_obj_state → from_obj_state → to_obj_state is the identity.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from psyche.coordinator import lost_work
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.coordinator.state_json import from_obj_state, to_obj_state
from psyche.coordinator.types import (
    MAX_CLIENTS,
    MAX_LOST_BATCHES,
    MAX_ROUND_RETRIES,
    MAX_WITNESSES,
    CoordinatorException,
    Witness,
)
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import Committee, CommitteeProof, WitnessProof
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import GcsCheckpoint, GcsRepo, HubCheckpoint, HubRepo, P2PCheckpoint
from support.configs import four_client_config

from .support import RS, make_sim, phase

POOL = [sim_identity(i) for i in range(8)]

ALLOWED_EDGES: set[tuple[RS, RS]] = {
    (RS.Uninitialized, RS.WaitingForMembers),  # resume
    (RS.Uninitialized, RS.Finished),  # resume with total_steps <= 1
    (RS.WaitingForMembers, RS.Warmup),  # tick with enough pending clients
    (RS.WaitingForMembers, RS.Paused),  # pause
    (RS.Warmup, RS.RoundTrain),  # tick at warmup_time, or warmup witnesses reach the count
    (RS.Warmup, RS.WaitingForMembers),  # tick: below min_clients (EpochEnd(false))
    (RS.Warmup, RS.Paused),  # pause
    (RS.RoundTrain, RS.RoundWitness),  # tick at max_round_train_time, or witness count
    (RS.RoundWitness, RS.RoundTrain),  # tick: next round
    (RS.RoundWitness, RS.Cooldown),  # tick: epoch over
    (RS.Cooldown, RS.WaitingForMembers),  # tick at cooldown_time, or checkpoint
    (RS.Cooldown, RS.Finished),  # the same once step >= total_steps
    (RS.Cooldown, RS.Paused),  # the same with a pending pause
    (RS.Paused, RS.WaitingForMembers),  # resume
    (RS.Paused, RS.Finished),  # resume once step >= total_steps
}


@st.composite
def configs(draw: st.DrawFn) -> CoordinatorConfig:
    min_clients = draw(st.integers(1, 3))
    init_min = draw(st.integers(min_clients, 4))
    epoch_time = draw(st.integers(5, 80))
    ramp = draw(st.booleans())
    start = draw(st.integers(1, 8))
    cfg = four_client_config(
        warmup_time=draw(st.integers(0, epoch_time - 1)),
        cooldown_time=draw(st.integers(1, 15)),
        max_round_train_time=draw(st.integers(1, epoch_time - 1)),
        round_witness_time=draw(st.integers(1, 6)),
        epoch_time=epoch_time,
        total_steps=draw(st.integers(1, 25)),
        init_min_clients=init_min,
        min_clients=min_clients,
        witness_nodes=draw(st.integers(0, min_clients)),
        global_batch_size_start=start,
        global_batch_size_end=draw(st.integers(start, 12)),
        global_batch_size_warmup_tokens=draw(st.integers(1, 400)) if ramp else 0,
        waiting_for_members_extra_time=draw(st.integers(1, 4)),
    )
    cfg.check()
    return cfg


ACTION_KINDS = (
    ["tick"] * 6
    + ["honest_witness"] * 4
    + ["warmup_witness"] * 2
    + ["bad_witness", "withdraw", "pause", "resume", "health_check", "checkpoint", "silence"]
)

actions = st.tuples(
    st.sampled_from(ACTION_KINDS),
    st.integers(0, 20),  # a time step / client number / index, depending on the kind
    st.integers(0, 9),  # a second small number
    st.booleans(),
)


@dataclass
class Model:
    """What the test remembers between calls to check the invariants."""

    step: int = 1
    epoch: int = 0
    run_state: RS = RS.Uninitialized
    next_data_index: int = 0
    last_round: tuple[int, int] | None = None
    round_lists: dict[tuple[int, int], list[NodeIdentity]] = field(default_factory=dict)


def _client(sim: Sim, n: int) -> tuple[int, NodeIdentity]:
    clients = sim.coord.epoch_state.clients
    if clients and n < 2 * len(clients):
        i = n % len(clients)
        return i, clients[i].id
    return n, POOL[n % len(POOL)]


def perform(sim: Sim, action: tuple[str, int, int, bool]) -> object:
    """Turn an abstract action into one coordinator call (or a Sim-side change)."""
    kind, a, b, flag = action
    c = sim.coord
    if kind == "tick":
        sim.advance(a)
        pending = POOL[: b % 7] if flag or c.run_state is RS.WaitingForMembers else None
        return c.tick(pending, sim.now, sim.next_seed())
    if kind == "honest_witness":
        if c.run_state is RS.Warmup:
            i, who = _client(sim, a % 8)
            proof = WitnessProof(position=i, index=i, witness=False)
            c.warmup_witness(who, Witness(proof, Bloom.empty(), Bloom.empty()), sim.now, 7)
            return None
        if c.run_state in (RS.RoundTrain, RS.RoundWitness):
            rnd = c.current_round()
            sel = c.committee_selection(rnd)
            elected = [i for i in range(rnd.clients_len) if sel.get_witness(i).witness]
            if elected:
                i = elected[a % len(elected)]
                c.witness(c.epoch_state.clients[i].id, sim.round_witness(i), sim.now)
                return None
        c.witness(_client(sim, a)[1], sim_witness(a, b, flag), sim.now)
        return None
    if kind == "warmup_witness":
        _, who = _client(sim, a)
        c.warmup_witness(who, sim_witness(b, b, flag), sim.now, sim.next_seed())
        return None
    if kind == "bad_witness":
        i, who = _client(sim, a)
        w = sim_witness(b, (b * 7 + a) % 11, flag)
        if c.run_state in (RS.RoundTrain, RS.RoundWitness) and i < c.current_round().clients_len:
            good = sim.round_witness(i)
            w = Witness(
                WitnessProof(good.proof.position ^ (1 + b % 3), good.proof.index, flag),
                good.participant_bloom,
                good.broadcast_bloom,
            )
        c.witness(who, w, sim.now)
        return None
    if kind == "withdraw":
        c.withdraw(a % 6)
        return None
    if kind == "pause":
        c.pause(sim.now)
        return None
    if kind == "resume":
        sim.advance(a)
        c.resume(sim.now)
        return None
    if kind == "health_check":
        _, reporter = _client(sim, a)
        _, target = _client(sim, b)
        prev = c.previous_round()
        if flag and prev is not None and c.run_state.active:
            report = sim.unhealthy_report()
            if report:
                return c.health_check(reporter, report)
            lst = c.previous_round_clients()
            if target in lst:
                ok_proof = c.committee_selection(prev).get_committee(lst.index(target))
                return c.health_check(reporter, [(target, ok_proof)])
        bad = CommitteeProof(Committee.Trainer, a % 9, b % 9)
        return c.health_check(reporter, [(target, bad)])
    if kind == "checkpoint":
        ck = [
            HubCheckpoint(HubRepo(repo_id="o/m", revision=str(a))),
            GcsCheckpoint(GcsRepo(bucket="b")),
            P2PCheckpoint(HubRepo(repo_id="o/m")),
        ][b % 3]
        if flag and c.run_state is RS.Cooldown and c.checkpointer_indices():
            k = c.checkpointer_indices()[a % len(c.checkpointer_indices())]
            return c.checkpoint(c.epoch_state.clients[k].id, k, ck, sim.now)
        i, who = _client(sim, a)
        return c.checkpoint(who, i, ck, sim.now)
    if kind == "silence":
        _, who = _client(sim, a)
        if flag:
            sim.silent.add(who)
        else:
            sim.silent.discard(who)
        return None
    raise AssertionError(kind)


def sim_witness(index: int, position: int, flag: bool) -> Witness:
    return Witness(
        WitnessProof(position=position, index=index, witness=flag),
        Bloom.empty(index),
        Bloom.empty(position),
    )


def check_invariants(sim: Sim, m: Model) -> None:
    c = sim.coord
    es = c.epoch_state
    state = c.run_state
    # sizes and identities
    assert 0 <= len(es.clients) <= MAX_CLIENTS
    assert len({x.id for x in es.clients}) == len(es.clients)
    assert all(len(r.witnesses) <= MAX_WITNESSES for r in es.rounds)
    assert len(es.lost) <= MAX_LOST_BATCHES
    # No (round, client) is queued twice, so no interval waits twice.
    assert len(set(es.lost)) == len(es.lost), es.lost
    if state in (RS.Warmup, RS.RoundTrain, RS.RoundWitness):
        idx = [w.proof.index for w in c.current_round().witnesses]
        assert all(0 <= i < len(es.clients) for i in idx), idx
        assert len(set(idx)) == len(idx), idx
    # monotone counters
    assert c.progress.step >= m.step and c.progress.epoch >= m.epoch
    # run-state edges
    if state is not m.run_state:
        assert (m.run_state, state) in ALLOWED_EDGES, (m.run_state, state)
    # rounds and data ranges
    if state in (RS.RoundTrain, RS.RoundWitness):
        rnd = c.current_round()
        assert rnd.clients_len == len(es.clients)
        key = (c.progress.epoch, rnd.height)
        if state is RS.RoundTrain and key != m.last_round:
            if m.last_round is not None and m.last_round[0] == key[0]:
                assert rnd.height == m.last_round[1] + 1
            else:
                assert rnd.height == 0
            assert rnd.data_index == m.next_data_index, (rnd.data_index, m.next_data_index)
            # Retried intervals (no lost work) take part of the batch; only fresh samples advance.
            retried = sum(b.size for b in rnd.retries)
            batch = c.batch_size_for_round(rnd)
            assert len(rnd.retries) <= min(MAX_ROUND_RETRIES, max(0, len(es.clients) - 1))
            assert retried <= batch
            assert not (rnd.retries and c.last_step_set())
            m.next_data_index = rnd.data_index + batch - retried
            m.last_round = key
            m.round_lists[key] = [x.id for x in es.clients]
        if rnd.height >= 2:
            prev = m.round_lists.get((key[0], rnd.height - 1))
            if prev is not None:
                assert c.previous_round_clients() == prev
        # Every stored round of this epoch rebuilds its own list (lost work needs h−1, h−2).
        for back in range(min(rnd.height, 3) + 1):
            past = es.rounds[(es.rounds_head - back) % len(es.rounds)]
            want = m.round_lists.get((key[0], rnd.height - back))
            if want is not None and past.height == rnd.height - back:
                assert c.round_clients(past) == want
    if state is RS.Warmup:
        assert c.progress.epoch_start_data_index == m.next_data_index
    # serde round trip
    obj = to_obj_state(c)
    assert to_obj_state(from_obj_state(obj)) == obj
    m.step, m.epoch, m.run_state = c.progress.step, c.progress.epoch, state


_PHASES: dict[str, Sim] = {}


def start_sim(start: str, cfg: CoordinatorConfig) -> Sim:
    """A fresh run with ``cfg`` (already resumed), or a copy of a support phase fixture."""
    if start == "fresh":
        sim = make_sim(cfg)
        sim.coord.resume(sim.now)
        return sim
    if start not in _PHASES:
        _PHASES[start] = phase(start)
    return copy.deepcopy(_PHASES[start])


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    start=st.sampled_from(["fresh", "fresh", "fresh", "Warmup", "RoundTrain", "Cooldown"]),
    cfg=configs(),
    acts=st.lists(actions, min_size=10, max_size=100),
)
def test_random_event_sequences(start: str, cfg: CoordinatorConfig, acts: list[Any]) -> None:
    sim = start_sim(start, cfg)
    m = Model(step=sim.coord.progress.step, epoch=sim.coord.progress.epoch)
    m.run_state = sim.coord.run_state
    if start != "fresh":
        # The fixture's history is not in the model: adopt the current round as the last one.
        rnd = sim.coord.current_round()
        m.last_round = (sim.coord.progress.epoch, rnd.height)
        m.next_data_index = rnd.data_index + lost_work.fresh_size(sim.coord, rnd)
        if sim.coord.run_state is RS.Warmup:
            m.next_data_index = sim.coord.progress.epoch_start_data_index
            m.last_round = None
    check_invariants(sim, m)
    visited = {sim.coord.run_state}
    for act in acts:
        before = to_obj_state(sim.coord)
        try:
            perform(sim, act)
        except CoordinatorException:
            assert to_obj_state(sim.coord) == before, f"rejected {act} changed the state"
        check_invariants(sim, m)
        visited.add(sim.coord.run_state)
    for s in visited:
        event(f"visited {s.name}")


@dataclass
class CheckedSim(Sim):
    """A Sim that checks the invariants after every call it makes."""

    model: Model = field(default_factory=Model)

    def _run(self, event: dict[str, Any], call: Any) -> Any:
        result = super()._run(event, call)
        self.events.clear()
        check_invariants(self, self.model)
        return result


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), seed=st.integers(0, 2**32))
def test_honest_run_reaches_the_end(cfg: CoordinatorConfig, seed: int) -> None:
    """Honest clients and punctual ticks: the run only ever ends in Finished and never stalls."""
    sim = CheckedSim(make_sim(cfg).coord, seed_counter=seed)
    sim.resume()
    for _ in range(2000):
        state = sim.coord.run_state
        if state is RS.Finished:
            break
        if state is RS.Warmup:
            sim.send_warmup_witnesses()
        elif state is RS.RoundTrain:
            sim.send_round_witnesses()
        sim.advance(1)
        sim.tick(POOL[:4] if sim.coord.run_state is RS.WaitingForMembers else None)
    assert sim.coord.run_state is RS.Finished
    assert sim.coord.progress.step >= cfg.total_steps
    assert sim.model.last_round is not None or cfg.total_steps == 1


# --- quorum ---------------------------------------------------------------------------------------

# witness_nodes (0 = "use n") → quorum, straight from docs/protocol.md, "Quorum": 1→1, 2→2, 3→2,
# else ⌊2W/3⌋.
QUORUM = {
    1: 1, 2: 2, 3: 2, 4: 2, 5: 3, 6: 4, 7: 4, 8: 5, 9: 6, 10: 6, 11: 7, 12: 8, 15: 10, 16: 10,
    20: 13, 31: 20, 32: 21,
}  # fmt: skip


def test_quorum_table() -> None:
    for w, q in QUORUM.items():
        cfg = four_client_config(witness_nodes=0, min_clients=1, init_min_clients=1)
        assert cfg.quorum(w) == q, w
        cfg = four_client_config(witness_nodes=w, min_clients=32, init_min_clients=32)
        for n in (0, 1, w, 100):
            assert cfg.quorum(n) == q, (w, n)
    assert four_client_config(witness_nodes=0).quorum(0) == 1


@given(w=st.integers(0, 32), n=st.integers(0, 256))
def test_quorum_formula(w: int, n: int) -> None:
    cfg = four_client_config(witness_nodes=w, min_clients=max(w, 1), init_min_clients=max(w, 1))
    eff = w if w else n
    expected = 1 if eff <= 1 else 2 if eff <= 3 else max(1, eff * 2 // 3)
    assert cfg.quorum(n) == expected
    assert 1 <= cfg.quorum(n) <= max(eff, 1)
    # With witness_nodes = 0 the timeout test n_w < quorum(n_w) fails only for n_w = 0.
    if w == 0:
        assert (n < cfg.quorum(n)) == (n == 0)


@given(w=st.integers(0, 32), n=st.integers(0, 300))
def test_witness_count(w: int, n: int) -> None:
    cfg = four_client_config(witness_nodes=w, min_clients=max(w, 1), init_min_clients=max(w, 1))
    assert cfg.witness_count(n) == (w if w else min(n, 32))
