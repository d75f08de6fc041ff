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
   sent). The recompute has a time budget; slots it does not reach stay unchecked.
2. When its witness of round ``r + 1`` is sent (:func:`verdict_of`): each recomputed slot whose
   result was downloaded and verified is scored with :func:`psyche.distro.similarity.captured_mass`
   and the ``checked``/``mismatch`` masks ride in the witness. A slot whose result has not arrived
   is left unchecked: a verifier never holds a round back.

The sub-batch is drawn with the seed of round ``r + 1``, unknown while round ``r`` trained, so a
trainer cannot tell which of its samples will be recomputed.
"""

from __future__ import annotations

import asyncio
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
from psyche.daemon.epoch import EpochView
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import ClientParts, healthy_index
from psyche.daemon.rounds import RoundState, decode_verified
from psyche.data.provider import DataProvider
from psyche.distro import Payload
from psyche.distro.result_format import ResultFormat
from psyche.distro.similarity import captured_mass, verdict_on
from psyche.protocol.commitment import sha256v
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.optimizers import DistroOptimizer
from psyche.protocol.shuffle import compute_shuffled_index
from psyche.training.errors import TrainingCancelled
from psyche.training.trainer import Trainer

__all__ = [
    "TIME_SHARE",
    "TOKEN_SHARE",
    "Judgement",
    "SlotGradient",
    "SubBatch",
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
10 % target for batches of 8 samples or more per trainer."""
TIME_SHARE = 0.25
"""Share of ``max_round_train_time`` the recompute may take before the remaining slots are left
unchecked, so that a slow verifier still trains its own batch in time."""


@dataclass(frozen=True, slots=True)
class SubBatch:
    """Which samples of a batch are recomputed (offsets in the batch, ascending)."""

    rows: tuple[int, ...]

    def of(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens[list(self.rows)]


def sub_batch(batch_size: int, seed: bytes, slot: int, verifier: int) -> SubBatch:
    """The sub-batch a verifier (by its witness position) recomputes for a slot:
    ``⌊TOKEN_SHARE · batch_size⌋`` whole samples, at least one, the first positions of a
    swap-or-not shuffle of the batch keyed by ``seed``, the slot and the verifier. Each verifier
    draws its own samples, so one unlucky sample cannot make a quorum of them accuse an honest
    trainer together (1 sample of 8 scored an honest result as low as +0.033 on the tiny model).

    Whole samples, not prefixes: on the tiny model a verifier recomputing the first 8, 16 or 32 of
    a sample's 64 tokens scored honest results as low as −0.06, −0.04 and −0.03 (below τ), a whole
    sample no lower than +0.09 (docs/protocol.md, "Threat model and result verification")."""
    if batch_size < 1:
        raise ValueError(f"cannot sub-sample a batch of {batch_size} samples")
    rows = max(1, math.floor(batch_size * TOKEN_SHARE))
    key = sha256v(seed, slot.to_bytes(2, "little"), verifier.to_bytes(2, "little"), b"sub-batch")
    picked = sorted(compute_shuffled_index(p, batch_size, key) for p in range(rows))
    return SubBatch(tuple(picked))


@dataclass(frozen=True, slots=True)
class SlotGradient:
    """One sampled result this verifier judges, and the gradient it recomputed for it (None
    until recomputed, and when the time budget ran out first)."""

    slot: int
    trainer: NodeIdentity
    batch: BatchId
    sub: SubBatch
    grads: tuple[torch.Tensor, ...] | None = None


@dataclass(frozen=True, slots=True)
class Judgement:
    """What a verifier of the current round needs at witness time."""

    judged_height: int
    slots: tuple[SlotGradient, ...]
    fmt: ResultFormat
    chunk: int


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
    trainer: Trainer, data: DataProvider, judgement: Judgement, budget_s: float
) -> Judgement:
    """Blocking: the gradient of each slot's sub-batch at the model's current weights, in the
    payload's parameter order (ascending name), until ``budget_s`` has passed. The model's
    ``.grad`` is left cleared and torch's RNG state untouched, so the client's own training
    that follows is bit-identical to a client that verified nothing."""
    deadline = time.monotonic() + budget_s
    cancel = threading.Event()
    timer = threading.Timer(budget_s, cancel.set)
    timer.start()
    model = trainer.model
    params = [p for _, p in sorted(model.named_parameters(), key=lambda item: item[0])]
    devices = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
    out = []
    try:
        for s in judgement.slots:
            if time.monotonic() >= deadline:
                out.append(s)
                continue
            grads: tuple[torch.Tensor, ...] | None = None
            try:
                tokens = s.sub.of(data.get_samples(s.batch))
                if time.monotonic() >= deadline:  # a slow data fetch spent the budget
                    raise TrainingCancelled("out of time after fetching the samples")
                with torch.random.fork_rng(devices=devices):
                    model.zero_grad(set_to_none=True)
                    trainer.accumulate_gradients(tokens, cancel)
                grads = tuple(
                    p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                    for p in params
                )
            except TrainingCancelled:
                log.info("verification of slot %d left unchecked: out of time", s.slot)
            except Exception as e:  # a verifier's failure must never cost the round
                log.warning("verification of slot %d failed: %s; left unchecked", s.slot, e)
            finally:
                model.zero_grad(set_to_none=True)
            out.append(
                SlotGradient(s.slot, s.trainer, s.batch, s.sub, grads) if grads is not None else s
            )
    finally:
        timer.cancel()
    return Judgement(judgement.judged_height, tuple(out), judgement.fmt, judgement.chunk)


async def judge_previous(
    parts: ClientParts, coord: Coordinator, epoch: EpochView, state: RoundState, kit: ModelKit
) -> None:
    """At the start of round ``state`` (before its apply): if this client verifies it, recompute
    the previous round's sampled results into ``state.judgement``. Nothing at all when
    ``verification_percent`` is 0 or this client is not a verifier."""
    me = healthy_index(parts, coord)
    if me is None or not isinstance(kit.trainer, Trainer):
        return  # recomputing a result is defined for DisTrO's one-gradient step
    judgement = slots_to_judge(coord, me, epoch.rounds.get(state.height - 1), kit.format)
    if judgement is None:
        return
    budget = TIME_SHARE * coord.config.max_round_train_time
    t0 = time.perf_counter()
    state.judgement = await asyncio.to_thread(recompute, kit.trainer, kit.data, judgement, budget)
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
    client holds verified (``judged`` is its record of the judged round); the rest unchecked."""
    checked = mismatch = 0
    if judged is None or judged.height != judgement.judged_height:
        return Verdict()
    for s in judgement.slots:
        res = judged.results.get(s.batch)
        if s.grads is None or res is None or res.trainer != s.trainer or res.fingerprint is None:
            continue
        payload = decode_verified(res, judged.step, judgement.fmt)
        if payload is None:
            continue
        score = _score(payload, s.grads, judgement.chunk)
        if score is None:
            continue
        vote = verdict_on(score)
        log.info(  # short: one line in a console log (the e2e test reads it)
            "verified step %d slot %d %s: %.4f %s",
            judged.step,
            s.slot,
            s.trainer.hex()[:8],
            score,
            {True: "match", False: "MISMATCH", None: "undecided"}[vote],
        )
        if vote is None:
            continue  # too close to call: left unchecked rather than risk a false accusation
        checked |= 1 << s.slot
        if not vote:
            mismatch |= 1 << s.slot
    return Verdict(checked, mismatch)


def _score(payload: Payload, grads: Sequence[torch.Tensor], chunk: int) -> float | None:
    try:
        return captured_mass(payload, grads, chunk)
    except ValueError as e:
        log.warning("could not score a result: %s", e)
        return None
