"""The verifier step: recompute the sampled results of the previous round and judge them.

See docs/protocol.md, "Threat model and result verification". When this client is one of the
verifiers of round ``r + 1`` it judges the results of round ``r`` that round ``r + 1``'s seed
samples. Two moments:

1. At the start of round ``r + 1``, before the apply of ``r − 1`` (:func:`recompute`): the model
   then still holds round ``r``'s pre-round weights (the apply of round ``r``'s start, plus the
   round's weight decay, which every client applies alike), so it is the one moment at which the
   gradient of round ``r``'s batches can be recomputed without a copy of the weights. For each
   sampled slot it runs forward and backward on a seed-chosen **sub-batch** of the trainer's batch
   and keeps the gradient (one parameter-sized tensor set per slot, freed once the witness is
   sent). When the slot's result is already held and scores below the match threshold on the
   sub-batch, it **escalates**: recomputes half the batch and keeps that gradient instead, since
   one sample's gradient scored honest results as low as −0.14 (bench/README.md). The recompute
   has a time budget; slots it does not reach stay unchecked. When the slot's result is already
   held and carries per-sample commitments (a run that verifies), the recompute is done at the
   trainer's own lookahead point instead (the pre-round weights moved by its previous result,
   which this client holds), and the fingerprint of the micro-batch holding the slot's committed
   sample (the same for all its verifiers: ``sub_batch``) is
   compared with the commitment (``psyche.daemon.commit_check``): the check that catches a free
   rider, which the score cannot. When that micro-batch is the sub-batch (one sample per
   micro-batch), one gradient serves both the score and the commitment; at the trainer's point
   honest results also score higher than at the pre-round weights (bench/README.md,
   "Per-sample commitments in the attack bench").
2. When its witness of round ``r + 1`` is sent (:func:`verdict_of`): each recomputed slot whose
   result was downloaded and verified is scored with :func:`psyche.distro.similarity.captured_mass`
   and the ``checked``/``mismatch`` masks ride in the witness. Only an escalated gradient may
   accuse; a low score on the sub-batch alone is no vote. A slot whose result has not arrived is
   left unchecked: a verifier never holds a round back. A failed commitment (agreement below
   ``MATCH_THRESHOLD``) votes "mismatch" whatever the score.

The sub-batch is drawn with the seed of round ``r + 1``, unknown while round ``r`` trained, so a
trainer cannot tell which of its samples will be recomputed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from psyche.coordinator import Coordinator
from psyche.coordinator.types import Verdict
from psyche.coordinator.verification import VERIFIERS_PER_ROUND, verify_seed
from psyche.daemon.commit_check import (
    MISMATCH,
    at_point,
    committed_rows,
    fingerprint_agreement,
    lookahead_of,
)
from psyche.daemon.epoch import EpochView
from psyche.daemon.judgement import Judgement, SlotGradient, SubBatch
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import ClientParts, healthy_index
from psyche.daemon.rounds import RoundState, decode_verified
from psyche.daemon.sparseloco_verifying import judge_sparseloco
from psyche.data.provider import DataProvider
from psyche.distro import Payload
from psyche.distro.result_format import ResultFormat
from psyche.distro.sample_commit import MATCH_THRESHOLD
from psyche.distro.similarity import THRESHOLD, captured_mass, verdict_on
from psyche.protocol.commitment import sha256v
from psyche.protocol.optimizers import DistroOptimizer
from psyche.protocol.shuffle import compute_shuffled_index
from psyche.training.errors import TrainingCancelled
from psyche.training.sparseloco_trainer import SparseLoCoTrainer
from psyche.training.trainer import Trainer

__all__ = [
    "ESCALATE_SHARE",
    "TIME_SHARE",
    "TOKEN_SHARE",
    "held_payload",
    "judge_previous",
    "recompute",
    "slots_to_judge",
    "sub_batch",
    "verdict_of",
]

log = logging.getLogger("psyche.daemon")

TOKEN_SHARE = 1 / 8
"""Share of a sampled batch's samples a verifier recomputes (``f``; at least one sample): at
``verification_percent`` 25 and 3 verifiers this keeps the extra compute per client under the
10 % target for batches of 8 samples or more per trainer (5.2 % measured at 25 and 10.2 % at 50
on the tiny model, 8 samples per trainer: bench/README.md, "One sub-batch for every verifier")."""
ESCALATE_SHARE = 1 / 2
"""Share of a sampled batch a verifier recomputes before it may vote "mismatch" (at least the
sub-batch): on the tiny model at 8 samples per trainer, 1 sample scored honest results as low as
−0.14, and half the batch scored honest results no lower than +0.079 (bench/README.md,
"Escalation")."""
TIME_SHARE = 0.25
"""Share of ``max_round_train_time`` the recompute may take before the remaining slots are left
unchecked, so that a slow verifier still trains its own batch in time."""


def sub_batch(batch_size: int, seed: bytes, slot: int, verifier: int) -> SubBatch:
    """The sub-batch a verifier (by its witness position) recomputes for a slot:
    ``⌊TOKEN_SHARE · batch_size⌋`` whole samples, at least one, taken from one swap-or-not shuffle
    of the batch keyed by ``seed`` and the slot. Every verifier of the slot takes the shuffle's
    first positions, so the first of them, the sample whose commitment is checked
    (``SubBatch.committed``), is in every verifier's sub-batch and one gradient serves both the
    score and the commitment: a commitment is exact, so the verifiers' votes on it must not split,
    and a sub-batch of its own besides cost each of the other two verifiers a second gradient
    (5 sample gradients per sampled result instead of 3). A low score on the sub-batch only
    escalates, never accuses, so a shared sub-batch cannot make a quorum accuse together. The
    escalation is ``⌈ESCALATE_SHARE · batch_size⌉`` samples starting at the verifier's own
    position ``p·rows`` of the shuffle (wrapping), so the verifiers' accusing gradients differ
    while the batch has enough samples. Where the batch is too small to escalate (at most two
    samples: the sub-batch already is half of it and may accuse), the sub-batch starts at the
    verifier's own position too.

    Whole samples, not prefixes: on the tiny model a verifier recomputing the first 8, 16 or 32 of
    a sample's 64 tokens scored honest results as low as −0.06, −0.04 and −0.03 (below τ), a whole
    sample no lower than +0.09 (docs/protocol.md, "Threat model and result verification")."""
    if batch_size < 1:
        raise ValueError(f"cannot sub-sample a batch of {batch_size} samples")
    rows = max(1, math.floor(batch_size * TOKEN_SHARE))
    wider = max(rows, math.ceil(batch_size * ESCALATE_SHARE))
    key = sha256v(seed, slot.to_bytes(2, "little"), b"sub-batch")

    def picked(start: int, n: int) -> tuple[int, ...]:
        positions = {(start + i) % batch_size for i in range(n)}
        return tuple(sorted(compute_shuffled_index(p, batch_size, key) for p in positions))

    own = verifier * rows
    # Without an escalation (a batch of at most two samples) the sub-batch itself may accuse:
    # then it is the verifier's own, as the escalation is.
    first = 0 if wider > rows else own
    return SubBatch(
        picked(first, rows), picked(own, wider), compute_shuffled_index(0, batch_size, key)
    )


def slots_to_judge(
    coord: Coordinator, me: int, judged: RoundState | None, fmt: ResultFormat
) -> Judgement | None:
    """The slots this client (at index ``me`` of the current round) judges as a verifier of the
    current round, with their sub-batches; None when it judges nothing (not a verifier,
    ``verification_percent`` 0, no previous training round here, or only its own result
    sampled). ``judged`` is this client's record of the previous round."""
    judging, prev = coord.current_round(), coord.round_back(1)
    optimizer = coord.llm.optimizer
    if prev is None or judged is None or judged.height != prev.height or not judged.trains:
        return None
    if not isinstance(optimizer, DistroOptimizer):
        return None  # the score is defined on DisTrO payloads only
    proof = coord.committee_selection(judging).get_witness(me)
    if not proof.witness or proof.position >= VERIFIERS_PER_ROUND:
        return None
    sampled = coord.judged_sample(judging, prev)
    if not sampled or judged.lrs.lr == 0:
        # At LR 0 a payload carries its trainer's empty residual, nothing of its batch.
        return None
    trainers = coord.round_clients(prev)
    seed = verify_seed(judging.random_seed)
    mine = coord.epoch_state.clients[me].id
    slots = []
    for slot, index in enumerate(sampled):
        if index >= len(trainers) or trainers[index] == mine:
            continue
        batch = judged.batch_of(trainers[index])
        if batch is None:
            continue
        sub = sub_batch(batch.size, seed, slot, proof.position)
        slots.append(SlotGradient(slot, trainers[index], batch, sub))
    if not slots:
        return None
    return Judgement(prev.height, tuple(slots), fmt, optimizer.compression_chunk)


def recompute(
    trainer: Trainer,
    data: DataProvider,
    judgement: Judgement,
    budget_s: float,
    judged: RoundState | None = None,
    before: RoundState | None = None,
) -> Judgement:
    """Blocking: the gradient of each slot's sub-batch at the model's current weights, in the
    payload's parameter order (ascending name), until ``budget_s`` has passed; escalated to the
    slot's wider sub-batch when its result is already held in ``judged`` (this client's record
    of the judged round) and scores below ``THRESHOLD``; and the held result's per-sample
    commitment checked at its lookahead point (``before``: the record of the round before the
    judged one, which holds the result that point follows). The model's ``.grad`` is left cleared
    and torch's RNG state untouched, so the client's own training that follows is bit-identical
    to a client that verified nothing."""
    deadline = time.monotonic() + budget_s
    cancel = threading.Event()
    timer = threading.Timer(budget_s, cancel.set)
    timer.start()
    params = tuple(p for _, p in sorted(trainer.model.named_parameters(), key=lambda i: i[0]))
    devices = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
    run = _Recompute(trainer, data, judgement, judged, before, deadline, cancel, params, devices)
    try:
        out = tuple(run.slot(s) for s in judgement.slots)
    finally:
        timer.cancel()
    return Judgement(judgement.judged_height, out, judgement.fmt, judgement.chunk)


@dataclass(frozen=True, slots=True)
class _Point:
    """A held result's trainer's gradient point: the pre-round weights moved by ``public``."""

    payload: Payload
    public: Payload | None
    prev_lr: float


@dataclass(frozen=True, slots=True)
class _Recompute:
    """One verifier's recompute pass over its slots (see :func:`recompute`)."""

    trainer: Trainer
    data: DataProvider
    judgement: Judgement
    judged: RoundState | None
    before: RoundState | None
    deadline: float
    cancel: threading.Event
    params: tuple[torch.nn.Parameter, ...]
    """The model's parameters in the payload's order (ascending name)."""
    devices: list[int]
    """The CUDA devices whose RNG state the recompute forks."""

    def slot(self, s: SlotGradient) -> SlotGradient:
        if time.monotonic() >= self.deadline:
            return s
        point = self._point(s)
        try:
            samples = self.data.get_samples(s.batch)
            if time.monotonic() >= self.deadline:  # a slow data fetch spent the budget
                raise TrainingCancelled("out of time after fetching the samples")
            at = (
                at_point(self.trainer, point.public, point.prev_lr)
                if isinstance(point, _Point)
                else contextlib.nullcontext()
            )
            with at:
                return self._judged_at(s, samples, point)
        except TrainingCancelled:
            log.info("verification of slot %d left unchecked: out of time", s.slot)
            return s
        except Exception as e:  # a verifier's failure must never cost the round
            log.warning("verification of slot %d failed: %s; left unchecked", s.slot, e)
            return s

    def _judged_at(
        self, s: SlotGradient, samples: torch.Tensor, point: _Point | float | None
    ) -> SlotGradient:
        """``s`` recomputed at the model's weights as they are (the trainer's point when
        ``point`` is one), its commitment checked, escalated if need be. Its commitment and
        escalation settle their own failures; the recompute's propagate to :meth:`slot`."""
        grads = self._gradient(s.sub.of(samples))
        done = SlotGradient(s.slot, s.trainer, s.batch, s.sub, grads, not s.sub.escalates)
        commitment = (
            point if not isinstance(point, _Point) else self._commitment(s, samples, point, grads)
        )
        done = dataclasses.replace(done, commitment=commitment)
        if done.may_accuse or (done.commitment is not None and done.commitment < MATCH_THRESHOLD):
            return done  # a failed commitment is evidence enough: no escalation
        return self._escalate(done, samples)

    def _point(self, s: SlotGradient) -> _Point | float | None:
        """Where the slot's held result says its trainer took its gradient: a :class:`_Point`
        when this client can rebuild it; ``MISMATCH`` when the result claims a lookahead other
        than its trainer's previous result held here; None when nothing is checked (the result
        is not held yet, has no commitments, or its point is unknown here): the recompute is
        then at the pre-round weights, as for a run without commitments."""
        payload = held_payload(self.judged, s, self.judgement.fmt)
        if payload is None or payload.commitments is None or self.judged is None:
            return None
        known, public = lookahead_of(
            self.before, s.trainer, payload.commitments.lookahead, self.judgement.fmt
        )
        if known != "ok":
            return MISMATCH if known == "mismatch" else None
        return _Point(payload, public, self.judged.lrs.prev_lr)

    def _commitment(
        self, s: SlotGradient, samples: torch.Tensor, point: _Point, grads: Sequence[torch.Tensor]
    ) -> float | None:
        """The held result's commitment agreement for the slot's committed sample, at the point the
        model is at; ``grads`` (the sub-batch's gradient there) serves when the sub-batch is
        that sample's micro-batch."""
        row = s.sub.commitment_row
        rows = committed_rows(point.payload, samples.shape[0], row)
        if rows is None:
            return MISMATCH
        try:
            if rows != s.sub.rows:
                grads = self._gradient(samples[list(rows)])
            return fingerprint_agreement(self.trainer, point.payload, row, grads)
        except TrainingCancelled:
            log.info("commitment of slot %d left unchecked: out of time", s.slot)
        except Exception as e:  # a verifier's failure must never cost the round
            log.warning("commitment of slot %d not checked: %s", s.slot, e)
        return None

    def _escalate(self, done: SlotGradient, samples: torch.Tensor) -> SlotGradient:
        """``done`` recomputed on the wider sub-batch if its held result scores below the match
        threshold on the first one; ``done`` itself otherwise, and when time runs out."""
        payload = held_payload(self.judged, done, self.judgement.fmt)
        assert done.grads is not None
        first = None if payload is None else _score(payload, done.grads, self.judgement.chunk)
        if first is None:
            return done
        done = dataclasses.replace(done, score=first)
        if first >= THRESHOLD or time.monotonic() >= self.deadline:
            return done
        wider = done.sub.escalated()
        try:
            grads = self._gradient(wider.of(samples))
        except TrainingCancelled:
            log.info("escalation of slot %d out of time: no accusation", done.slot)
            return done
        except Exception as e:
            log.warning("escalation of slot %d failed: %s; no accusation", done.slot, e)
            return done
        log.info(
            "slot %d scored %.4f on %d samples: recomputed %d",
            done.slot,
            first,
            len(done.sub.rows),
            len(wider.rows),
        )
        return dataclasses.replace(done, sub=wider, grads=grads, may_accuse=True)

    def _gradient(self, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        model = self.trainer.model
        try:
            with torch.random.fork_rng(devices=self.devices):
                model.zero_grad(set_to_none=True)
                self.trainer.accumulate_gradients(tokens, self.cancel)
            return tuple(
                p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                for p in self.params
            )
        finally:
            model.zero_grad(set_to_none=True)


def held_payload(judged: RoundState | None, s: SlotGradient, fmt: ResultFormat) -> Payload | None:
    """The slot's result as this client holds it, downloaded and verified; None otherwise."""
    if judged is None:
        return None
    res = judged.results.get(s.batch)
    if res is None or res.trainer != s.trainer or res.fingerprint is None:
        return None
    return decode_verified(res, judged.step, fmt)


async def judge_previous(
    parts: ClientParts, coord: Coordinator, epoch: EpochView, state: RoundState, kit: ModelKit
) -> None:
    """At the start of round ``state`` (before its apply): if this client verifies it, recompute
    the previous round's sampled results into ``state.judgement``. Nothing at all when
    ``verification_percent`` is 0 or this client is not a verifier."""
    if isinstance(kit.trainer, SparseLoCoTrainer):
        await judge_sparseloco(parts, coord, epoch, state, kit)
        return
    me = healthy_index(parts, coord)
    if me is None or not isinstance(kit.trainer, Trainer):
        return  # recomputing a result is defined for DisTrO's one-gradient step
    judged = epoch.rounds.get(state.height - 1)
    before = epoch.rounds.get(state.height - 2)
    judgement = slots_to_judge(coord, me, judged, kit.format)
    if judgement is None:
        return
    budget = TIME_SHARE * coord.config.max_round_train_time
    t0 = time.perf_counter()
    state.judgement = await asyncio.to_thread(
        recompute, kit.trainer, kit.data, judgement, budget, judged, before
    )
    done = sum(1 for s in state.judgement.slots if s.grads is not None)
    log.info(
        "verifier of step %d: recomputed %d of %d sampled results in %.3f s",
        state.step,
        done,
        len(judgement.slots),
        time.perf_counter() - t0,
    )


def verdict_of(judgement: Judgement, judged: RoundState | None) -> Verdict:
    """Blocking: the verdict on the slots whose gradient was recomputed and whose result this
    client holds verified (``judged`` is its record of the judged round); the rest unchecked.
    A slot whose gradient is of the first sub-batch only (its result arrived after the
    recompute, or the escalation ran out of time) may match but not accuse."""
    checked = mismatch = 0
    if judged is None or judged.height != judgement.judged_height:
        return Verdict()
    for s in judgement.slots:
        if s.audit is not None:  # a SparseLoCo link, audited and logged already
            checked |= 1 << s.slot
            if not s.audit:
                mismatch |= 1 << s.slot
            continue
        if s.commitment is not None and s.commitment < MATCH_THRESHOLD:
            log.info(
                "verified step %d slot %d %s: commitment %.4f MISMATCH",
                judged.step,
                s.slot,
                s.trainer.hex()[:8],
                s.commitment,
            )
            checked |= 1 << s.slot
            mismatch |= 1 << s.slot
            continue
        score = s.score if s.score is not None else _held_score(judged, s, judgement)
        if score is None:
            continue
        vote = verdict_on(score)
        if vote is False and not s.may_accuse:
            vote = None  # one sub-batch is not evidence enough to accuse (see ESCALATE_SHARE)
        log.info(  # short: one line in a console log (the e2e test reads it)
            "verified step %d slot %d %s: %.4f on %d samples %s",
            judged.step,
            s.slot,
            s.trainer.hex()[:8],
            score,
            len(s.sub.rows),
            {True: "match", False: "MISMATCH", None: "undecided"}[vote],
        )
        if vote is None:
            continue  # too close to call: left unchecked rather than risk a false accusation
        checked |= 1 << s.slot
        if not vote:
            mismatch |= 1 << s.slot
    return Verdict(checked, mismatch)


def _held_score(judged: RoundState, s: SlotGradient, judgement: Judgement) -> float | None:
    """``s``'s gradient's score of its result as this client now holds it; None when there is no
    gradient, the result is not held verified, or it cannot be scored."""
    if s.grads is None:
        return None
    payload = held_payload(judged, s, judgement.fmt)
    return None if payload is None else _score(payload, s.grads, judgement.chunk)


def _score(payload: Payload, grads: Sequence[torch.Tensor], chunk: int) -> float | None:
    try:
        return captured_mass(payload, grads, chunk)
    except ValueError as e:
        log.warning("could not score a result: %s", e)
        return None
