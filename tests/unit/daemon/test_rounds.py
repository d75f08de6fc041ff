"""Round decisions shared by the daemon and the simulation: attestation and consensus apply."""

from __future__ import annotations

from collections.abc import ItemsView
from pathlib import Path

from psyche.coordinator import Coordinator, RunState
from psyche.coordinator.consensus import participant_item
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundLRs,
    RoundState,
    build_witness,
    results_to_apply,
    round_state_for,
)
from psyche.protocol.committee import WitnessProof
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.run_file import load_run_config

LRS = RoundLRs(lr=1e-3, prev_lr=1e-3, zero_optim=False)
"""Any positive LRs: these tests do not depend on their value."""


TINY = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"


def training_coordinator() -> Coordinator:
    rc = load_run_config(TINY)
    s = Sim(Coordinator(run_id="t", config=rc.config, model=rc.model,
                        run_state=RunState.WaitingForMembers))  # fmt: skip
    ids = [sim_identity(i) for i in range(3)]
    s.tick(ids)
    s.advance(2)
    s.tick(ids)
    s.send_warmup_witnesses()
    assert s.coord.run_state is RunState.RoundTrain
    return s.coord


def test_round_state_assigns_every_sample_once() -> None:
    coord = training_coordinator()
    state = round_state_for(coord)
    assert state.trains and state.height == 0 and state.step == 1
    sizes = sorted(b.size for b in state.assignment)
    assert sum(sizes) == coord.config.global_batch_size_end and len(state.assignment) == 3


def test_witness_attests_only_the_assignee_and_downloaded_results() -> None:
    a, b, c = (sim_identity(i) for i in range(3))
    state = RoundState(0, 1, True, {BatchId(0, 1): a, BatchId(2, 3): b, BatchId(4, 5): c}, LRS)
    state.results[BatchId(0, 1)] = ReceivedResult(a, BatchId(0, 1), b"\x01" * 32, b"x")
    state.results[BatchId(2, 3)] = ReceivedResult(c, BatchId(2, 3), b"\x02" * 32, b"y")  # impostor
    state.results[BatchId(4, 5)] = ReceivedResult(c, BatchId(4, 5), b"\x03" * 32, None)  # pending
    w = build_witness(WitnessProof(0, 0, True), state, bloom_seed=7)
    assert w.participant_bloom.contains(participant_item(a))
    assert not w.participant_bloom.contains(participant_item(b))
    assert w.broadcast_bloom.contains(b"\x01" * 32)
    assert not w.broadcast_bloom.contains(b"\x02" * 32)
    assert not w.broadcast_bloom.contains(b"\x03" * 32)


def test_apply_takes_only_results_with_a_witness_quorum() -> None:
    coord = training_coordinator()
    a, b = sim_identity(0), sim_identity(1)
    state = RoundState(0, 1, True, {BatchId(0, 2): a, BatchId(3, 5): b}, LRS)
    state.results[BatchId(0, 2)] = ReceivedResult(a, BatchId(0, 2), b"\x01" * 32, b"x")
    state.results[BatchId(3, 5)] = ReceivedResult(b, BatchId(3, 5), b"\x02" * 32, b"y")
    seen_a = RoundState(
        0, 1, True, dict(state.assignment), LRS, {BatchId(0, 2): state.results[BatchId(0, 2)]}
    )
    witnesses = [build_witness(WitnessProof(i, i, True), seen_a, bloom_seed=i) for i in range(2)]
    chosen = results_to_apply(state, witnesses, coord)
    assert [r.trainer for r in chosen] == [a]


class _CountingDict(dict[BatchId, NodeIdentity]):
    """An assignment that counts its scans."""

    scans = 0

    def items(self) -> ItemsView[BatchId, NodeIdentity]:  # type: ignore[override]
        type(self).scans += 1
        return super().items()


def test_batch_of_answers_every_trainer_of_a_full_run_without_scanning_the_assignment() -> None:
    # Issue 38: a verifier looks up each sampled trainer; a scan per lookup is O(sampled × N).
    who = [sim_identity(i) for i in range(256)]
    assignment = _CountingDict({BatchId(2 * i, 2 * i + 1): w for i, w in enumerate(who)})
    assignment[BatchId(600, 601)] = who[0]  # a second batch: the first one is its answer
    state = RoundState(0, 1, True, assignment, LRS)
    built = _CountingDict.scans
    assert [state.batch_of(w) for w in who] == [BatchId(2 * i, 2 * i + 1) for i in range(256)]
    assert state.batch_of(sim_identity(999)) is None
    assert _CountingDict.scans == built <= 1


def test_a_round_is_all_received_once_each_batch_is_in_turned_away_or_not_coming() -> None:
    a, b, c, d = (sim_identity(i) for i in range(4))
    batches = [BatchId(i, i) for i in range(4)]
    state = RoundState(0, 1, True, dict(zip(batches, (a, b, c, d), strict=True)), LRS)
    state.results[batches[0]] = ReceivedResult(a, batches[0], b"\x01" * 32, b"x")
    assert not state.all_received()
    state.turned_away.add(batches[1])  # b's result came and was refused: nothing more will
    state.results[batches[1]] = ReceivedResult(b, batches[1], b"\x02" * 32, None)
    assert not state.all_received()  # c and d: nothing yet
    assert state.all_received(ignore={c, d})
    # d left the epoch with nothing announced: not awaited; c's result is downloading: awaited
    state.results[batches[2]] = ReceivedResult(c, batches[2], b"\x03" * 32, None)
    assert not state.all_received(staying={a, b})
    assert state.all_received(ignore={c}, staying={a, b, c})
    state.results[batches[2]] = ReceivedResult(c, batches[2], b"\x03" * 32, b"z")
    assert state.all_received(staying={a, b, c})
    assert not state.all_received()
