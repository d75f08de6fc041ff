"""Result verification on the coordinator (docs/protocol.md, "Threat model and result
verification"): sampling, verdict validation, the quorum rules, slashing and the view clients
use to leave rejected results out of the apply."""

from __future__ import annotations

import dataclasses

import pytest

from psyche.coordinator.rewards import epoch_points
from psyche.coordinator.scripted_clients import Sim
from psyche.coordinator.types import ClientState, CoordinatorException, Verdict
from psyche.coordinator.verification import (
    MAX_SAMPLED_RESULTS,
    VERIFIERS_PER_ROUND,
    judge,
    sampled_count,
    sampled_trainers,
    verdict_error,
    verdict_quorum,
    verifier_count,
)
from psyche.protocol.identity import NodeIdentity

from .support import RS, end_round, pool, verifying_sim

MISMATCH = Verdict(checked=1, mismatch=1)
MATCH = Verdict(checked=1)


def test_sampled_count_rounds_up_and_is_capped() -> None:
    assert sampled_count(4, 0) == 0
    assert sampled_count(0, 50) == 0
    assert sampled_count(4, 25) == 1
    assert sampled_count(4, 26) == 2
    assert sampled_count(10, 1) == 1
    assert sampled_count(256, 100) == MAX_SAMPLED_RESULTS


def test_sampled_trainers_are_distinct_deterministic_and_seed_dependent() -> None:
    a = sampled_trainers(64, 7, 25)
    assert a == sampled_trainers(64, 7, 25)
    assert len(a) == len(set(a)) == 16 and all(0 <= i < 64 for i in a)
    assert a != sampled_trainers(64, 8, 25)
    # Over many seeds every index gets sampled at about the configured rate.
    hits = [0] * 8
    for seed in range(400):
        for i in sampled_trainers(8, seed, 25):
            hits[i] += 1
    assert all(60 <= h <= 140 for h in hits), hits


def test_verifiers_and_quorum() -> None:
    assert [verifier_count(w) for w in (1, 2, 3, 10)] == [1, 2, 3, VERIFIERS_PER_ROUND]
    assert [verdict_quorum(v) for v in (1, 2, 3)] == [1, 2, 2]


@pytest.mark.parametrize(
    ("verdict", "verifier", "sampled", "own", "ok"),
    [
        (Verdict(), False, 0, [], True),
        (MATCH, True, 1, [], True),
        (MISMATCH, True, 2, [1], True),
        (MATCH, False, 1, [], False),
        (Verdict(checked=0, mismatch=1), True, 1, [], False),
        (Verdict(checked=2), True, 1, [], False),
        (MATCH, True, 0, [], False),
        (MATCH, True, 1, [0], False),
    ],
)
def test_verdict_error(
    verdict: Verdict, verifier: bool, sampled: int, own: list[int], ok: bool
) -> None:
    assert (verdict_error(verdict, verifier, sampled, own) is None) is ok


def test_judge_rules() -> None:
    from psyche.coordinator.types import Witness
    from psyche.protocol.bloom import Bloom
    from psyche.protocol.committee import WitnessProof

    def w(pos: int, v: Verdict) -> Witness:
        return Witness(WitnessProof(pos, pos, True), Bloom.empty(), Bloom.empty(), v)

    ids = pool(5)
    judged = ids
    # slot 0 samples index 4
    two_against = [w(0, MISMATCH), w(1, MISMATCH), w(2, MATCH)]
    out = judge(two_against, ids[:3], judged, [4], 3)
    assert out.rejected == [ids[4]] and out.false_accusers == []
    lone = [w(0, MISMATCH), w(1, MATCH), w(2, MATCH)]
    out = judge(lone, ids[:3], judged, [4], 3)
    assert out.rejected == [] and out.false_accusers == [ids[0]]
    split = [w(0, MISMATCH), w(1, MATCH)]
    out = judge(split, ids[:2], judged, [4], 3)
    assert out.rejected == [] and out.false_accusers == []
    # A witness beyond the verifier positions is not counted.
    outsider = [w(0, MISMATCH), w(3, MISMATCH)]
    assert judge(outsider, [ids[0], ids[3]], judged, [4], 3).rejected == []


def _judging_round(sim: Sim) -> tuple[NodeIdentity, list[int]]:
    """End round 0 honestly; in round 1 return the sampled trainer and the verifiers' indices."""
    sim.send_round_witnesses()
    end_round(sim)
    c = sim.coord
    prev = c.previous_round()
    assert prev is not None
    sampled = c.judged_sample(c.current_round(), prev)
    assert len(sampled) == 1
    sel = c.committee_selection(c.current_round())
    verifiers = [i for i in range(len(c.epoch_state.clients)) if sel.get_witness(i).position < 3]
    return c.round_clients(prev)[sampled[0]], verifiers


def _send(sim: Sim, index: int, verdict: Verdict) -> None:
    w = dataclasses.replace(sim.round_witness(index), verdict=verdict)
    sim.witness(sim.coord.epoch_state.clients[index].id, w)


def test_rejected_trainer_is_excluded_by_clients_ejected_and_slashed() -> None:
    sim = verifying_sim()
    trainer, verifiers = _judging_round(sim)
    c = sim.coord
    for i in verifiers:
        if c.epoch_state.clients[i].id != trainer:
            _send(sim, i, MISMATCH)
    end_round(sim)
    assert c.run_state is RS.RoundTrain and c.index_of(trainer) is None
    # At the start of this round clients apply round 0 from round 1's witnesses: the same
    # verdicts, read from the coordinator state, leave the trainer's result out.
    prev, judged = c.previous_round(), c.previous_previous_round()
    assert prev is not None and judged is not None
    assert c.verdict_outcome(prev, judged).rejected == [trainer]
    # Nothing else decides differently: a fresh copy of the state reads the same.
    assert c.clone().verdict_outcome(prev, judged).rejected == [trainer]
    for _ in range(200):
        if c.run_state is RS.Cooldown:
            break
        sim.send_round_witnesses()
        end_round(sim)
    c.config = dataclasses.replace(c.config, epoch_time=1)
    while c.run_state is not RS.Cooldown:
        sim.send_round_witnesses()
        end_round(sim)
    sim.advance(c.config.cooldown_time)
    result = c.tick(None, sim.now, 1)
    points = epoch_points(c, result, 300, 50)
    assert points.slashed == {trainer: 50}
    assert trainer not in points.earned and len(points.earned) == 3


def test_verdict_refused_without_verification() -> None:
    sim = verifying_sim(vp=0)
    sim.send_round_witnesses()
    end_round(sim)
    sel = sim.coord.committee_selection(sim.coord.current_round())
    i = next(j for j in range(4) if sel.get_witness(j).position == 0)
    before = sim.coord.clone()
    with pytest.raises(CoordinatorException, match="InvalidWitness"):
        sim.coord.witness(
            sim.coord.epoch_state.clients[i].id,
            dataclasses.replace(sim.round_witness(i), verdict=MATCH),
            sim.now,
        )
    assert sim.coord == before


def test_withdrawn_state_is_ejected_not_healthy() -> None:
    sim = verifying_sim()
    trainer, verifiers = _judging_round(sim)
    c = sim.coord
    idx = c.index_of(trainer)
    assert idx is not None
    c.withdraw(idx)
    for i in verifiers:
        if c.epoch_state.clients[i].id != trainer:
            _send(sim, i, MISMATCH)
    end_round(sim)
    gone = [x for x in c.epoch_state.exited_clients if x.id == trainer]
    assert gone and gone[0].state is ClientState.Ejected
