"""The verifier step (docs/protocol.md, "Threat model and result verification"): which results a
client judges and on which samples, the recompute on the tiny model with real torch, the verdict
it builds from the results it holds, and the time budget that leaves slots unchecked."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence

import torch

from psyche.coordinator import Coordinator
from psyche.coordinator.scripted_clients import Sim
from psyche.coordinator.types import CoordinatorException, Verdict
from psyche.daemon.judgement import Judgement, SlotGradient
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundLRs,
    RoundState,
    result_fingerprint,
    round_state_for,
)
from psyche.daemon.verifying import (
    ESCALATE_SHARE,
    TOKEN_SHARE,
    recompute,
    slots_to_judge,
    sub_batch,
    verdict_of,
)
from psyche.distro import DistroResult, Payload, PayloadSpec, decode_payload, encode_payload
from psyche.distro.payload import payload_hash
from psyche.distro.result_format import DistroFormat
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity
from psyche.training import init_model, llama_config
from psyche.training.trainer import Trainer

from ..coordinator.support import end_round, verifying_sim
from ..training.helpers import TINY, make_trainer

LRS = RoundLRs(lr=1e-3, prev_lr=1e-3, zero_optim=False)
"""Any positive LRs: these tests do not depend on their value."""


CHUNK = 64


class _Tokens:
    """Deterministic token ids per sample index: what a data provider serves for a batch."""

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        rows = [
            torch.randint(3, 259, (32,), generator=torch.Generator().manual_seed(i))
            for i in range(batch_id.start, batch_id.end + 1)
        ]
        return torch.stack(rows)


def _spec() -> PayloadSpec:
    return make_trainer(init_model(llama_config(TINY), seed=0)).distro.payload_spec  # type: ignore[attr-defined]


# --- sampling of the sub-batch ---


def test_sub_batch_takes_an_eighth_of_the_samples_chosen_by_seed_slot_and_verifier() -> None:
    seed = b"\x01" * 32
    for size in (1, 2, 7, 8, 9, 16, 64, 100):
        sub = sub_batch(size, seed, 0, 0)
        assert len(sub.rows) == max(1, int(size * TOKEN_SHARE))
        assert list(sub.rows) == sorted(set(sub.rows)) and all(0 <= r < size for r in sub.rows)
        assert sub_batch(size, seed, 0, 0) == sub  # a pure function of public round data
        # Its escalation: half the batch (at least the sub-batch); the first verifier's is a
        # superset of its sub-batch (both start at the shuffle's first position).
        assert len(sub.escalation) == max(len(sub.rows), math.ceil(size * ESCALATE_SHARE))
        assert set(sub.rows) <= set(sub.escalation)
        assert sub.escalates == (len(sub.escalation) > len(sub.rows))
        assert sub.escalated().rows == sub.escalation
    # Another seed or slot draws other samples (over a batch of 64, 8 rows each); another
    # verifier the same sub-batch but another escalation.
    base = sub_batch(64, seed, 0, 0)
    assert sub_batch(64, b"\x02" * 32, 0, 0) != base
    assert sub_batch(64, seed, 1, 0) != base
    other = sub_batch(64, seed, 0, 1)
    assert other.rows == base.rows and other.escalation != base.escalation
    tokens = torch.arange(64 * 4).reshape(64, 4)
    assert sub_batch(64, seed, 0, 0).of(tokens).shape == (8, 4)


def test_the_verifiers_of_a_slot_share_the_sub_batch_and_escalate_on_distinct_samples() -> None:
    """The verifiers of a slot recompute the same sub-batch, which holds the committed sample
    (one gradient serves the score and the commitment), and a low score there only escalates.
    The accusing gradients are their own: while the batch has enough samples, the escalations
    start at distinct positions of the shuffle, so the three are not the same set. A batch too
    small to escalate (at most 2 samples) is recomputed from each verifier's own position, since
    that sub-batch may accuse."""
    for size in (8, 24, 64):
        for seed in (b"\x01" * 32, b"\x09" * 32):
            for slot in range(4):
                subs = [sub_batch(size, seed, slot, v) for v in range(3)]
                assert len({s.rows for s in subs}) == 1 and all(s.escalates for s in subs)
                assert subs[0].committed in subs[0].rows
                assert len({s.escalation for s in subs}) == 3
    for size in (1, 2):
        subs = [sub_batch(size, b"\x01" * 32, 0, v) for v in range(3)]
        assert not any(s.escalates for s in subs)
        if size == 2:
            assert subs[0].rows != subs[1].rows  # each its own sample (wrapping at the third)


def test_the_verifiers_of_a_slot_check_the_same_committed_sample() -> None:
    """A commitment is exact, so the verifiers of a slot check the same sample's (the seeded
    shuffle's first) and their votes on it cannot split; it is uniform over the batch, not the
    lowest of a verifier's rows (a free rider that trains the first samples would pass that)."""
    seen = set()
    for i in range(40):
        seed = bytes([i]) * 32
        subs = [sub_batch(16, seed, 0, v) for v in range(3)]
        committed = {s.committed for s in subs}
        assert len(committed) == 1 and subs[0].committed in subs[0].rows
        assert {s.escalated().committed for s in subs} == committed
        seen |= committed
    assert len(seen) >= 10 and max(seen) >= 8  # spread over the batch, late samples included


# --- which slots a client judges ---


def _round1(vp: int) -> tuple[Sim, RoundState]:
    """A run sampling ``vp`` % of results, in round 1, with the client view of round 0."""
    sim = verifying_sim(vp=vp, run_id="verifier-step")
    round0 = round_state_for(sim.coord)
    sim.send_round_witnesses()
    end_round(sim)
    return sim, round0


def _verifiers(c: Coordinator) -> list[int]:
    sel = c.committee_selection(c.current_round())
    return [
        i
        for i in range(len(c.epoch_state.clients))
        if sel.get_witness(i).witness and sel.get_witness(i).position < 3
    ]


def test_verifiers_judge_every_sampled_result_but_their_own() -> None:
    sim, round0 = _round1(100)
    c = sim.coord
    prev = c.previous_round()
    assert prev is not None
    sampled = c.judged_sample(c.current_round(), prev)
    trainers = c.round_clients(prev)
    assert len(sampled) == 4
    verifiers = _verifiers(c)
    assert len(verifiers) == 3
    for i in verifiers:
        j = slots_to_judge(c, i, round0, DistroFormat(_spec()))
        assert j is not None and j.judged_height == 0 and j.chunk == CHUNK
        me = c.epoch_state.clients[i].id
        want = [(p, trainers[x]) for p, x in enumerate(sampled) if trainers[x] != me]
        assert [(s.slot, s.trainer) for s in j.slots] == want
        for s in j.slots:
            assert s.batch == round0.batch_of(s.trainer) and s.grads is None
    for i in set(range(4)) - set(verifiers):
        assert slots_to_judge(c, i, round0, DistroFormat(_spec())) is None
    # The coordinator accepts the witness of each verifier judging exactly those slots.
    for i in verifiers:
        j = slots_to_judge(c, i, round0, DistroFormat(_spec()))
        assert j is not None
        bits = sum(1 << s.slot for s in j.slots)
        w = dataclasses.replace(sim.round_witness(i), verdict=Verdict(bits, bits & 0b1))
        assert not isinstance(sim.witness(c.epoch_state.clients[i].id, w), CoordinatorException)
    assert len(c.current_round().witnesses) == 3


def test_nothing_to_judge_without_verification_or_a_previous_round() -> None:
    sim, round0 = _round1(0)
    for i in range(4):
        assert slots_to_judge(sim.coord, i, round0, DistroFormat(_spec())) is None
    sim = verifying_sim(vp=100, run_id="verifier-step")
    for i in range(4):  # round 0: nothing was trained before it
        assert slots_to_judge(sim.coord, i, None, DistroFormat(_spec())) is None


# --- recompute and verdict with real torch ---


def _trained(trainer: Trainer, batch: BatchId, step: int) -> tuple[bytes, Payload]:
    out = trainer.train_step(
        _Tokens().get_samples(batch),
        step=step,
        lr=1e-3,
        prev_lr=1e-3,
        prev_self_results=None,
        zero_optim=False,
        batch_id=(batch.start, batch.end),
    )
    return out.payload, out.self_result


def _flipped(p: Payload) -> Payload:
    res = tuple(DistroResult(r.idx, -r.val, r.xshape, r.totalk) for r in p.results)
    return Payload(p.step, p.batch_start, p.batch_end, p.trainer_nonce, p.quantized, res)


def _received(
    who: NodeIdentity, batch: BatchId, step: int, wire: bytes, spec: PayloadSpec
) -> ReceivedResult:
    digest = payload_hash(step, batch.start, batch.end, wire)
    fp = result_fingerprint(decode_payload(wire, spec))
    return ReceivedResult(who, batch, digest, wire, fp)


def _setup(
    n_trainers: int,
) -> tuple[Trainer, list[tuple[NodeIdentity, BatchId, bytes]], PayloadSpec]:
    """A verifier holding the trainers' pre-round weights, and each trainer's honest result on
    its own batch of 8 samples (trained from identical weights, as in a round)."""
    model = init_model(llama_config(TINY), seed=0)
    verifier = make_trainer(copy.deepcopy(model))
    spec = verifier.distro.payload_spec  # type: ignore[attr-defined]
    sent = []
    for t in range(n_trainers):
        trainer = make_trainer(copy.deepcopy(model))
        batch = BatchId(100 * t, 100 * t + 7)
        wire, _ = _trained(trainer, batch, step=1)
        sent.append((NodeIdentity(bytes([t + 1]) * 32, bytes([t + 1]) * 32), batch, wire))
    return verifier, sent, spec


def _judgement(sent: Sequence[tuple[NodeIdentity, BatchId, bytes]], spec: PayloadSpec) -> Judgement:
    seed = b"\x07" * 32
    slots = tuple(
        SlotGradient(p, who, batch, sub_batch(batch.size, seed, p, 0))
        for p, (who, batch, _) in enumerate(sent)
    )
    return Judgement(0, slots, DistroFormat(spec), CHUNK)


def _round0(sent: Sequence[tuple[NodeIdentity, BatchId, bytes]]) -> RoundState:
    return RoundState(0, 1, True, {batch: who for who, batch, _ in sent}, LRS)


def _held(
    sent: Sequence[tuple[NodeIdentity, BatchId, bytes]], spec: PayloadSpec, flip: int
) -> RoundState:
    """Round 0 as a client holds it: every result downloaded, the one at ``flip`` with every
    sign of its honest update flipped."""
    round0 = _round0(sent)
    for i, (who, batch, wire) in enumerate(sent):
        if i == flip:
            wire = encode_payload(_flipped(decode_payload(wire, spec)), spec.version)
        round0.results[batch] = _received(who, batch, 1, wire, spec)
    return round0


def test_honest_results_match_and_a_flipped_one_is_a_mismatch() -> None:
    verifier, sent, spec = _setup(3)
    round0 = _held(sent, spec, flip=2)
    before = [p.detach().clone() for p in verifier.model.parameters()]
    rng = torch.random.get_rng_state()
    judged = recompute(verifier, _Tokens(), _judgement(sent, spec), 60, round0)  # type: ignore[arg-type]
    # The verifier's own model is as it was: same weights, no gradient left, RNG untouched.
    assert all(torch.equal(a, b) for a, b in zip(before, verifier.model.parameters(), strict=True))
    assert all(p.grad is None for p in verifier.model.parameters())
    assert torch.equal(rng, torch.random.get_rng_state())
    assert all(s.grads is not None for s in judged.slots)
    # The flipped result scored below the match line on one sample, so its verifier recomputed
    # half the batch before accusing; the honest ones matched on their sample.
    assert [len(s.sub.rows) for s in judged.slots] == [1, 1, 4]
    assert [s.may_accuse for s in judged.slots] == [False, False, True]
    assert verdict_of(judged, round0) == Verdict(checked=0b111, mismatch=0b100)


def test_a_low_score_on_one_sample_alone_accuses_nobody() -> None:
    """A result that arrives after the recompute is scored on the sub-batch only: it may match,
    but a low score there is no vote (the escalation needs the pre-round weights)."""
    verifier, sent, spec = _setup(2)
    judged = recompute(verifier, _Tokens(), _judgement(sent, spec), budget_s=60)  # type: ignore[arg-type]
    assert [s.may_accuse for s in judged.slots] == [False, False]
    assert verdict_of(judged, _held(sent, spec, flip=1)) == Verdict(checked=0b1, mismatch=0)


def test_results_not_held_stay_unchecked() -> None:
    verifier, sent, spec = _setup(2)
    judged = recompute(verifier, _Tokens(), _judgement(sent, spec), budget_s=60)  # type: ignore[arg-type]
    round0 = _round0(sent)
    who, batch, wire = sent[0]
    round0.results[batch] = _received(who, batch, 1, wire, spec)
    # The second result is announced but not downloaded: no verdict on it.
    who, batch, _ = sent[1]
    round0.results[batch] = ReceivedResult(who, batch, b"\0" * 32, None)
    assert verdict_of(judged, round0) == Verdict(checked=0b1, mismatch=0)
    # A record of another round judges nothing.
    assert verdict_of(judged, RoundState(5, 6, True, {}, LRS)) == Verdict()


def test_a_spent_time_budget_leaves_every_slot_unchecked() -> None:
    verifier, sent, spec = _setup(2)
    judged = recompute(verifier, _Tokens(), _judgement(sent, spec), budget_s=0)  # type: ignore[arg-type]
    assert all(s.grads is None for s in judged.slots)
    round0 = _round0(sent)
    for who, batch, wire in sent:
        round0.results[batch] = _received(who, batch, 1, wire, spec)
    assert verdict_of(judged, round0) == Verdict()
