"""Witnessing: attest the previous round's results, note stragglers, report the unhealthy.

An elected witness sends one witness per round: blooms over the previous round's verified
results (docs/protocol.md, "Witnesses and consensus") and, from a verifier, its verdict on the
previous round's sampled results (:mod:`.verifying`), either early from the training step once
every awaited member has finished, or when the round's RoundWitness phase begins. The
:class:`WitnessStep` is that phase: it stops the round's training, sends the witness if it was
not sent, and marks the members that never finished as stragglers when the round timed out.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Protocol

from psyche.coordinator import ClientState, Coordinator, WitnessMetadata
from psyche.coordinator.types import MAX_EVALS, EvalResult
from psyche.daemon.copy_check import settle_copies
from psyche.daemon.epoch import EpochView
from psyche.daemon.parts import ClientParts, healthy_index
from psyche.daemon.rounds import RoundState, bloom_seed_for, build_witness
from psyche.daemon.sparseloco_verifying import settle_votes
from psyche.daemon.verifying import verdict_of
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.rejections import Rejection


class RoundTraining(Protocol):
    """What the witness phase needs of the round's training step
    (:class:`~psyche.daemon.training.TrainingStep`, which itself sends witnesses early through
    this module: the step is named by its interface to keep the two modules one-way)."""

    @property
    def state(self) -> RoundState: ...

    def cancel(self) -> None: ...


__all__ = [
    "RoundTraining",
    "WitnessStep",
    "report_unhealthy",
    "send_witness",
    "witness_metadata",
]

log = logging.getLogger("psyche.daemon")


async def send_witness(parts: ClientParts, coord: Coordinator, epoch: EpochView) -> None:
    """This round's witness, once, if this client is an elected witness of it."""
    i = healthy_index(parts, coord)
    rnd = coord.current_round()
    state = epoch.rounds.get(rnd.height)
    if i is None or state is None or state.sent_witness:
        return
    proof = coord.committee_selection(rnd).get_witness(i)
    if not proof.witness:
        return
    state.sent_witness = True
    seed = bloom_seed_for(parts.identity, rnd, os.urandom(8))
    attested = epoch.rounds.get(rnd.height - 1)
    if attested is not None and attested.unsettled:
        _settle(parts, attested)
    witness = build_witness(proof, attested, seed)
    if state.judgement is not None:
        judgement, state.judgement = state.judgement, None  # the gradients are freed once sent
        judgement = settle_votes(judgement, coord)
        judged = epoch.rounds.get(rnd.height - 1)
        witness.verdict = await asyncio.to_thread(verdict_of, judgement, judged)
    await parts.backend.send_witness(witness, witness_metadata(parts, state.step))


def _settle(parts: ClientParts, attested: RoundState) -> None:
    """Near-duplicates held before anything else of their round was: refused now if a reference
    shows them closer to their original than to the round's results (``settle_copies``)."""
    for batch, original in settle_copies(attested, parts.identity):
        trainer = attested.results[batch].trainer
        detail = f"batch {batch} of step {attested.step} repeats batch {original}"
        parts.rejections.record(Rejection.copy_payload, peer_id_for(trainer.p2p_identity), detail)


def witness_metadata(parts: ClientParts, step: int) -> WitnessMetadata:
    """This client's latest loss, throughput and eval accuracies (the first ``MAX_EVALS``
    tasks of ``--eval-tasks``, by their index there)."""
    stats = parts.stats
    evals = tuple(
        EvalResult(task=i, value=float(score.accuracy))
        for i, score in sorted(stats.evals.items())
        if i < 256
    )[:MAX_EVALS]
    return WitnessMetadata(
        step=step, tokens_per_sec=stats.tokens_per_sec, loss=stats.loss, evals=evals
    )


async def report_unhealthy(parts: ClientParts, coord: Coordinator) -> None:
    """A client that witnessed the previous round reports the trainers that a quorum of its
    witnesses agree delivered nothing (never itself: a forged view could name it too;
    docs/protocol.md item 8)."""
    prev = coord.previous_round()
    if prev is None or coord.current_round().height < 2 or coord.epoch_state.first_round:
        return
    prev_clients = coord.previous_round_clients()
    sel = coord.committee_selection(prev)
    me = parts.identity
    mine = next((i for i, c in enumerate(prev_clients) if c == me), None)
    if mine is None or not sel.get_witness(mine).witness:
        return
    report = []
    for i, who in enumerate(prev_clients):
        idx = coord.index_of(who)
        if idx is None or coord.epoch_state.clients[idx].state is not ClientState.Healthy:
            continue
        if who != me and coord.trainer_ejectable(who):
            report.append((who, sel.get_committee(i)))
    if report:
        log.warning("health check: reporting %s", [w.hex() for w, _ in report])
        await parts.backend.send_health_check(report)


class WitnessStep:
    """The RoundWitness phase of the round that ``training`` ran."""

    def __init__(self, parts: ClientParts, epoch: EpochView, training: RoundTraining) -> None:
        self.parts = parts
        self.epoch = epoch
        self.training = training

    async def begin(self, coord: Coordinator) -> None:
        self.training.cancel()
        self._note_stragglers(coord)
        await send_witness(self.parts, coord, self.epoch)

    def _note_stragglers(self, coord: Coordinator) -> None:
        """At the end of a round that hit its train timeout (fewer witnesses than elected), the
        members that never announced Finished become stragglers (see ``EpochView.stragglers``,
        docs/protocol.md item 18)."""
        rnd = coord.current_round()
        state = self.training.state
        if state.closed or state.step != coord.progress.step:
            return
        state.closed = True
        if len(rnd.witnesses) >= coord.witness_count():
            return
        late = {
            c.id
            for c in coord.epoch_state.clients
            if c.state is ClientState.Healthy and c.id not in state.finished
        } - {self.parts.identity}
        if late - self.epoch.stragglers:
            log.info(
                "round %d timed out; not waiting for %s until they announce Finished again",
                rnd.height,
                sorted(w.hex() for w in late - self.epoch.stragglers),
            )
        self.epoch.stragglers |= late
