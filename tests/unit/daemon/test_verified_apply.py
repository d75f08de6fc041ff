"""Clients leave a result that a quorum of verifiers rejected out of the apply, identically, and
its interval is trained again (docs/protocol.md, "Threat model and result verification"): the
real coordinator driven by simulated clients and the daemon's own apply decisions."""

from __future__ import annotations

import dataclasses

from psyche.coordinator import RunState
from psyche.coordinator.scripted_clients import Sim, sim_result_hash
from psyche.coordinator.types import Verdict
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundState,
    consensus_results_missing,
    rejected_by_verifiers,
    results_to_apply,
    round_state_for,
)
from psyche.protocol.identity import NodeIdentity

from ..coordinator.support import end_round, verifying_sim

RS = RunState


def _end_round(sim: Sim) -> None:
    end_round(sim)
    assert sim.coord.run_state is RS.RoundTrain


def _deliver(state: RoundState) -> None:
    for batch, who in state.assignment.items():
        digest = sim_result_hash(state.step, batch.start, batch.end)
        state.results[batch] = ReceivedResult(who, batch, digest, b"ok")


def _round0_then_judge(
    sim: Sim, verdict: Verdict | None, kept: list[RoundState] | None = None
) -> tuple[RoundState, NodeIdentity]:
    c = sim.coord
    round0 = round_state_for(c)
    sim.send_round_witnesses()
    _end_round(sim)
    _deliver(round0)
    if kept is not None:
        kept.append(round_state_for(c))
    prev = c.previous_round()
    assert prev is not None
    judged = c.round_clients(prev)
    trainer = judged[c.judged_sample(c.current_round(), prev)[0]]
    sel = c.committee_selection(c.current_round())
    for i, cl in enumerate(c.epoch_state.clients):
        if not sel.get_witness(i).witness:
            continue
        w = sim.round_witness(i)
        if verdict is not None and sel.get_witness(i).position < 3 and cl.id != trainer:
            w = dataclasses.replace(w, verdict=verdict)
        sim.witness(cl.id, w)
    _end_round(sim)
    return round0, trainer


def test_rejected_result_is_left_out_and_retried() -> None:
    sim = verifying_sim(run_id="verify")
    c = sim.coord
    round0, trainer = _round0_then_judge(sim, Verdict(checked=1, mismatch=1))
    prev = c.previous_round()
    assert prev is not None
    assert rejected_by_verifiers(c) == {trainer}
    chosen = results_to_apply(round0, prev.witnesses, c)
    assert {r.trainer for r in chosen} == set(round0.assignment.values()) - {trainer}
    bad_batch = round0.batch_of(trainer)
    assert bad_batch is not None and bad_batch in c.current_round().retries
    # A client that never received the rejected result does not need it.
    del round0.results[bad_batch]
    assert consensus_results_missing(round0, prev.witnesses, c) == []


def test_matching_verdicts_change_nothing() -> None:
    sim = verifying_sim(run_id="verify")
    c = sim.coord
    round0, trainer = _round0_then_judge(sim, Verdict(checked=1, mismatch=0))
    prev = c.previous_round()
    assert prev is not None
    assert rejected_by_verifiers(c) == set()
    chosen = results_to_apply(round0, prev.witnesses, c)
    assert {r.trainer for r in chosen} == set(round0.assignment.values())
    assert c.index_of(trainer) is not None


def test_result_of_the_round_it_was_caught_in_is_left_out_too() -> None:
    """The trainer is ejected at the end of round 1, the round that judged it; its round 1
    result still reached the witnesses, but the apply of round 1 (at round 3) leaves it out."""
    sim = verifying_sim(run_id="verify")
    c = sim.coord
    kept: list[RoundState] = []
    _, trainer = _round0_then_judge(sim, Verdict(checked=1, mismatch=1), kept)
    round1 = kept[0]
    _deliver(round1)
    sim.send_round_witnesses()
    _end_round(sim)
    prev = c.previous_round()
    assert prev is not None and c.current_round().height == 3
    assert trainer in rejected_by_verifiers(c)
    chosen = {r.trainer for r in results_to_apply(round1, prev.witnesses, c)}
    assert trainer in round1.assignment.values() and trainer not in chosen
    assert chosen == set(round1.assignment.values()) - {trainer}
