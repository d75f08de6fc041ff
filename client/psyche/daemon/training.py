"""One round's RoundTrain: apply round h−2, report the unhealthy, train this client's batch.

A :class:`TrainingStep` is started from the previous round's step (whose training must be over
before the apply: a training thread still running would restore its pre-lookahead backup over
the applied weights) and owns its round: the :class:`RoundState`, the training task and its
cancel flag, and the DisTrO self-result the next round's lookahead needs. While the round runs,
:meth:`poll` announces ``Finished`` once this client's result is out and the previous round's
results are all in, and witnesses as soon as every member has finished (the opportunistic end).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from psyche.coordinator import ClientState, Coordinator
from psyche.daemon.epoch import EpochView
from psyche.daemon.gradients import write_gradient
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import ClientParts
from psyche.daemon.rounds import (
    APPLY_LAG,
    ReceivedResult,
    RoundState,
    consensus_results_missing,
    result_sketch,
    results_to_apply,
)
from psyche.daemon.verifying import judge_previous
from psyche.daemon.witnessing import report_unhealthy, send_witness
from psyche.data.provider import DataError
from psyche.distro import Payload
from psyche.distro.agreement import opposed
from psyche.distro.payload import payload_hash
from psyche.events import ApplyEvent, OptimStatsEvent, TrainEvent
from psyche.p2p.messages import Finished, TrainingResult, WireCommitment, sign_announcement
from psyche.protocol.commitment import make_commitment
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity
from psyche.training.errors import AuditRecordingError, NonFiniteGradient, TrainingCancelled
from psyche.training.hashing import model_hash
from psyche.training.sparseloco_trainer import SparseLoCoTrainer
from psyche.training.trainer import Trainer, TrainOutput

__all__ = ["MissingConsensusResult", "TrainingStep"]

log = logging.getLogger("psyche.daemon")


class MissingConsensusResult(Exception):
    """The witnesses agree on a result this client never received (it holds no announcement
    for it, so it cannot fetch it: it does not know its blob hash). Applying without it would
    leave this client's weights different from every other honest client's, so the client drops
    out of the epoch instead (its weights are discarded and loaded again at the next warmup)."""


class TrainingStep:
    def __init__(
        self,
        parts: ClientParts,
        epoch: EpochView,
        kit: ModelKit,
        state: RoundState,
        previous: TrainingStep | None,
        on_open: Callable[[EpochView, RoundState], None] | None = None,
    ) -> None:
        self.parts = parts
        self.epoch = epoch
        self.kit = kit
        self.state = state
        self.self_result: Payload | None = None
        """This round's own DisTrO result, for the next round's lookahead (None if it did not
        train, or its training was cancelled)."""
        self._previous = previous
        self._on_open = on_open
        """Called once the round is recorded (the gossip router takes the peers' announcements
        that arrived for it before it started here)."""
        self._cancel = threading.Event()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self, coord: Coordinator) -> None:
        # The round is recorded first, before anything is awaited, so peers' results for it
        # are taken from now on; those that came earlier were held for it and are taken now.
        state = self.state
        self.epoch.rounds[state.height] = state
        self.epoch.keep_rounds_from(state.height - APPLY_LAG)
        self.parts.result_blobs.round_started(self.parts.transport, self.epoch.epoch, state.height)
        if self._on_open is not None:
            self._on_open(self.epoch, state)
        if self._previous is not None:
            await self._previous.stop()
        prev_self = self._previous.self_result if self._previous is not None else None
        self._previous = None  # one round of history is all a step keeps
        self.parts.sharing.clear()  # joiners are served until training resumes
        if self.parts.evals is not None:
            await self.parts.evals.stop()  # an eval pass must not read weights being changed
        # The weights still are those the previous round trained from: a verifier recomputes now.
        await judge_previous(self.parts, coord, self.epoch, state, self.kit)
        await self._apply(coord)
        await report_unhealthy(self.parts, coord)
        mine = state.batch_of(self.parts.identity) if state.trains else None
        if mine is None:
            if state.trains:
                # Weight decay is part of every client's step, batch or not, or weights drift.
                await asyncio.to_thread(self.kit.trainer.sit_out, lr=state.lrs.lr)
            return
        self._task = asyncio.create_task(self._train(coord, mine, prev_self))

    def cancel(self) -> None:
        """Ask the training to stop; its lookahead is undone and no result is published."""
        self._cancel.set()

    @property
    def training(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wait(self) -> None:
        """Until this round's training is over (finished or cancelled)."""
        if self._task is not None:
            await asyncio.wait([self._task])

    async def stop(self) -> None:
        self.cancel()
        await self.wait()

    # --- apply --------------------------------------------------------------------------------

    async def _apply(self, coord: Coordinator) -> None:
        """Apply round h−2 by the consensus of round h−1's witnesses, waiting for downloads
        still in flight up to the apply deadline, then log the parameter hash (every round, so
        agreement between clients is checkable at every step)."""
        state, epoch, kit = self.state, self.epoch, self.kit
        applied = epoch.rounds.get(state.height - APPLY_LAG)
        prev = coord.previous_round()
        payloads: list[Any] = []
        left_out: tuple[str, ...] = ()
        if prev is not None and state.height >= APPLY_LAG:
            missing = consensus_results_missing(applied, prev.witnesses, coord)
            if missing:
                raise MissingConsensusResult(
                    f"the witnesses of step {state.step - 1} agree on results of "
                    f"{', '.join(missing)} that this client never received; applying without "
                    "them would make its weights differ from its peers'"
                )
        if applied is not None and prev is not None and state.height >= APPLY_LAG:
            chosen = results_to_apply(applied, prev.witnesses, coord)
            pending = [
                t
                for r in chosen
                if (t := epoch.downloads.get((applied.height, r.batch))) is not None
            ]
            if pending:
                await asyncio.wait(pending, timeout=self.parts.apply_deadline_s)
            received = [applied.results.get(r.batch, r) for r in chosen]
            late = [f"batch {r.batch}" for r in received if r.payload is None]
            if late:
                # The peers apply these; applying the rest would leave this client's weights
                # unlike theirs for good. A stuck download must not hold the run either, so
                # the client sits the epoch out and loads the model afresh at the next one.
                raise MissingConsensusResult(
                    f"the results of {', '.join(late)} of step {applied.step}, which the "
                    f"witnesses agree on, were not downloaded within "
                    f"{self.parts.apply_deadline_s:g} s"
                )
            # Decoded when they arrived (kept within the round's budget), else decoded again.
            payloads = [applied.take_decoded(r, kit.format) for r in received]
            payloads, left_out = await asyncio.to_thread(
                self._agreeing, payloads, received, applied.step
            )
            if payloads:
                await asyncio.to_thread(kit.trainer.apply_step, payloads, lr=state.lrs.lr)
        digest = await asyncio.to_thread(model_hash, kit.trainer.model)
        self.parts.events.write(
            ApplyEvent(
                step=state.step,
                height=state.height,
                applied_step=applied.step if applied is not None and payloads else None,
                batches=len(payloads),
                left_out=left_out,
                model_hash=digest,
                served_blobs=len(self.parts.transport.served()),
            )
        )

    @staticmethod
    def _agreeing(
        payloads: list[Any], received: list[ReceivedResult], step: int
    ) -> tuple[list[Any], tuple[str, ...]]:
        """``payloads`` without the DisTrO results that point against the rest of their round
        (``psyche.distro.agreement``; every client leaves out the same ones), and whose."""
        if not payloads or not isinstance(payloads[0], Payload):
            return payloads, ()
        out = set(opposed(payloads))
        if not out:
            return payloads, ()
        names = tuple(received[i].trainer.hex() for i in sorted(out))
        log.warning(
            "left out of the apply: the step-%d results of %s, which point against the rest "
            "of the round",
            step,
            ", ".join(names),
        )
        return [p for i, p in enumerate(payloads) if i not in out], names

    # --- train --------------------------------------------------------------------------------

    async def _train(self, coord: Coordinator, batch: BatchId, prev_self: Payload | None) -> None:
        t0 = time.perf_counter()
        trainer = self.kit.trainer
        if isinstance(trainer, SparseLoCoTrainer):
            # The chain is recorded straight into the files it is served from.
            trainer.audit_spool = self.parts.transport.spool_dir
            trainer.audit_pool = self.parts.transport.recycle_dir
        out = await self._train_step(batch, prev_self)
        if out is None:
            return
        self.self_result = out.self_result
        if isinstance(trainer, SparseLoCoTrainer) and (trail := trainer.take_trail()) is not None:
            # The chain this result commits to, for the next round's verifiers to fetch: served
            # before the result is announced, so that no verifier can ask for it too early and
            # a round cancelled in between never leaves an announced result without its chain
            # (its verifiers would hold "not found" against an honest trainer).
            await self.parts.audit_blobs.publish(self.parts.transport, self.state.height, trail)
        await self._publish(batch, out.payload)
        self._record(batch, out, t0)
        every = self.parts.options.optim_stats_steps
        if every and self.state.step % every == 0:
            await self._optim_stats(self.state.step)

    async def _train_step(self, batch: BatchId, prev_self: Payload | None) -> TrainOutput | None:
        """The trainer's step on ``batch`` in a worker thread; None when the round ends with no
        result of this client's (cancelled, non-finite, or the batch could not be had)."""
        state, kit, lrs = self.state, self.kit, self.state.lrs
        try:
            tokens = await asyncio.to_thread(kit.data.get_samples, batch)
            out = await asyncio.to_thread(
                kit.trainer.train_step,
                tokens,
                step=state.step,
                lr=lrs.lr,
                prev_lr=lrs.prev_lr,
                prev_self_results=prev_self,
                zero_optim=lrs.zero_optim,
                cancel=self._cancel,
                batch_id=(batch.start, batch.end),
            )
            delay = self.parts.options.training_delay_s
            if delay > 0:
                await asyncio.sleep(delay)
                if self._cancel.is_set():
                    raise TrainingCancelled("cancelled during --dummy-training-delay-secs")
        except TrainingCancelled:
            log.warning("training of step %d cancelled; lookahead undone", state.step)
            return None
        except NonFiniteGradient as e:
            # The trainer restored its weights; with no result the health checks treat this
            # client like any that did not finish, and a warning beats a task's traceback.
            log.warning("training of step %d dropped: %s", state.step, e)
            return None
        except AuditRecordingError as e:
            # A full disk costs this client its round (the health checks treat it like any
            # that did not finish), not its process.
            log.error("training of step %d dropped: %s", state.step, e)
            return None
        except DataError as e:
            # The batch could not be had (the data server refuses a round that moved on, a file
            # went missing): like a dropped round, a warning, not a task's unretrieved traceback.
            log.warning("training of step %d skipped: %s", state.step, e)
            return None
        return out

    async def _publish(self, batch: BatchId, payload: bytes) -> None:
        """Serve this client's result as a blob, hold it as received, and announce it."""
        parts, state, kit = self.parts, self.state, self.kit
        digest = payload_hash(state.step, batch.start, batch.end, payload)
        write_gradient(parts, state.step, batch, parts.identity.p2p_identity, payload)
        blob = parts.transport.serve(payload, report_askers=True)
        parts.result_blobs.add(parts.transport, (self.epoch.epoch, state.height), blob)
        commitment = make_commitment(parts.key, digest)
        # Its fingerprint lets this client refuse a peer's copy of it (docs/protocol.md).
        decoded = kit.format.decode(payload)
        sk = result_sketch(decoded, kit.format)
        state.hold(
            ReceivedResult(parts.identity, batch, digest, payload, sk.fingerprint), sk, decoded
        )
        ann = TrainingResult(
            step=state.step,
            batch_start=batch.start,
            batch_end=batch.end,
            commitment=WireCommitment.of(commitment),
            blob_hash=blob,
            blob_size=len(payload),
            nonce=0,
        )
        data = sign_announcement(parts.key, ann)
        await parts.transport.announce(data)
        self.epoch.outbox.sent_result(data, height=state.height, now=parts.clock(), blob_hash=blob)
        parts.wake()

    def _record(self, batch: BatchId, out: TrainOutput, t0: float) -> None:
        """The step's loss and throughput for the status line, and its ``TrainEvent`` (its
        ``seconds`` from ``t0``, the step's start, to the announcement)."""
        parts, state = self.parts, self.state
        parts.stats.loss = out.loss
        parts.stats.tokens_per_sec = out.tokens / out.seconds if out.seconds > 0 else 0.0
        parts.events.write(
            TrainEvent(
                step=state.step,
                batch=(batch.start, batch.end),
                loss=out.loss,
                seconds=round(time.perf_counter() - t0, 4),
                compute_s=round(out.seconds, 4),
                payload_bytes=len(out.payload),
                lr=state.lrs.lr,
                tokens=out.tokens,
            )
        )

    async def _optim_stats(self, step: int) -> None:
        from psyche.metrics import optim_stats

        trainer = self.kit.trainer
        if not isinstance(trainer, Trainer):
            return  # the statistics describe DisTrO's state
        try:
            stats = await asyncio.to_thread(optim_stats, trainer.model, trainer.distro)
        except Exception as e:  # statistics must never cost a round
            log.warning("optimizer statistics of step %d failed: %s", step, e)
            return
        self.parts.events.write(OptimStatsEvent(step=step, stats=stats))

    # --- opportunistic end --------------------------------------------------------------------

    def _previous_in(self, healthy: set[NodeIdentity]) -> bool:
        """The previous round's results are all here, turned away, or not coming: a straggler's
        is not awaited, nor one of a trainer no longer ``healthy`` (ejected or gone since; an
        ejected client cancels its training) unless its result is already on the way."""
        prev = self.epoch.rounds.get(self.state.height - 1)
        return prev is None or prev.all_received(self.epoch.stragglers, staying=healthy)

    async def poll(self, coord: Coordinator) -> None:
        """``Finished`` once this client's part of the round is done, and the witness once
        every awaited member has finished (stragglers are not awaited) and its pending votes
        are decided."""
        parts, state, epoch = self.parts, self.state, self.epoch
        if state.step != coord.progress.step:
            return
        mine = state.batch_of(parts.identity) if state.trains else None
        mine_done = mine is None or mine in state.results or not self.training
        healthy = {c.id for c in coord.epoch_state.clients if c.state is ClientState.Healthy}
        if not state.sent_finished and mine_done and self._previous_in(healthy):
            state.sent_finished = True
            state.finished.add(parts.identity)
            done = Finished(step=state.step, warmup=False)
            data = sign_announcement(parts.key, done)
            await parts.transport.announce(data)
            epoch.outbox.sent_finished(data, height=state.height, now=parts.clock())
        # A verifier's witness also waits for its votes on whether audited trainers served
        # their states (bounded: the RoundWitness phase sends it regardless).
        settled = state.judgement is None or state.judgement.settled()
        if state.sent_finished and healthy - epoch.stragglers <= state.finished and settled:
            await send_witness(parts, coord, epoch)
