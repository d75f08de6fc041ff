"""The client daemon: follows coordinator states and trains, shares, attests and applies (SPEC §4).

Shape: one asyncio process with three small loops (coordinator states, gossip, a 500 ms poll for
opportunistic steps) and a worker thread for the blocking work (model loading, data fetching,
training). The libp2p host lives in its own child process behind :class:`P2PNode`. Phases are
driven from what the coordinator state says, never from remembered phase names alone: a round is
identified by (epoch, step), so a state the daemon never saw (SPEC §11.15) cannot desynchronise
it. Per round it keeps a :class:`RoundState`; decisions are the pure functions of
:mod:`psyche.daemon.rounds`, shared with the in-process simulation.

Improvements over the reference: a payload still downloading when its round is applied is
awaited until a deadline and then skipped with a warning (never a fatal exit); if training is
cancelled the DisTrO lookahead is undone; an internal error drops the client out of the epoch
cleanly (it stops training and witnessing) and it rejoins in the next epoch. After every apply
the daemon logs the parameter hash so tests can prove that honest clients agree bit for bit.

Nothing a peer sends is dropped silently: every announcement the daemon cannot use (malformed or
badly signed, from a key outside the epoch, a result for a round it no longer holds or has not
started, for a batch not assigned to its sender, with a bad commitment or payload, a forged
``ModelAvailable``) is a :class:`~psyche.p2p.rejections.Rejection`, counted and logged once per
peer and kind. :meth:`ClientDaemon.rejection_counts` adds the host process's counts, and the
daemon writes them to its event log (``rejections``) whenever they change, for the testnet
summary and status view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from psyche.backends.base import Backend, BackendError
from psyche.checkpoint.local import state_tensors
from psyche.checkpoint.p2p import ReceivedModel
from psyche.coordinator import ClientState, Coordinator, RunState, Witness, WitnessMetadata
from psyche.daemon.checkpointing import Checkpointer, CheckpointOptions
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundState,
    bloom_seed_for,
    build_witness,
    results_to_apply,
    round_lrs,
    round_state_for,
    verify_result,
)
from psyche.daemon.sharing import ModelSharing, SharingOptions
from psyche.daemon.state import EpochView, PeerDirectory, Trained
from psyche.distro import Payload, decode_payload
from psyche.distro.payload import payload_hash
from psyche.events import EventLog
from psyche.p2p.identity import peer_id_for
from psyche.p2p.messages import (
    Finished,
    ModelAvailable,
    TrainingResult,
    WireCommitment,
    open_announcement,
    sign_announcement,
)
from psyche.p2p.node import P2PNode
from psyche.p2p.rejections import Rejection, Rejections, merge_counts
from psyche.protocol.bloom import Bloom
from psyche.protocol.commitment import make_commitment, verify_commitment
from psyche.protocol.committee import WitnessProof
from psyche.protocol.config import P2PCheckpoint, P2PGcsCheckpoint
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import SecretKey
from psyche.training.errors import TrainingCancelled
from psyche.training.hashing import model_hash

log = logging.getLogger("psyche.daemon")

POLL_S = 0.5
WARMUP_GRACE_S = 20.0
"""How long a loaded client waits for every peer's ready signal before sending its warmup
witness anyway (a peer that never loads must not hold the run until warmup_time)."""


class ClientDaemon:
    def __init__(
        self,
        *,
        key: SecretKey,
        backend: Backend,
        directory: PeerDirectory,
        p2p: P2PNode,
        load: Callable[[Coordinator, ReceivedModel | None], Trained],
        events: EventLog,
        checkpoint: CheckpointOptions | None = None,
        sharing: SharingOptions | None = None,
        apply_deadline_s: float = 30.0,
    ) -> None:
        self.key = key
        self.identity = key.node_identity()
        self.backend = backend
        self.directory = directory
        self.p2p = p2p
        self._load = load
        self.events = events
        self.checkpointer = Checkpointer(checkpoint or CheckpointOptions(), backend, events)
        self.rejections = Rejections(log)
        self.sharing = ModelSharing(key, p2p, sharing or SharingOptions(), self.rejections)
        self._reported: dict[str, int] = {}
        self._process_start = round(time.time(), 3)
        self.apply_deadline_s = apply_deadline_s
        self.coord: Coordinator | None = None
        self.trained: Trained | None = None
        self.view: EpochView | None = None
        self.prev_self: Payload | None = None
        self._cancel = threading.Event()
        self._training: asyncio.Task[None] | None = None
        self._fetches: set[asyncio.Task[None]] = set()
        self._step_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self.finished = asyncio.Event()

    # --- loops --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the run until it is Finished (or the backend fails)."""
        await self.directory.publish_p2p_addrs(self.p2p.listen_addrs)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._state_loop())
                tg.create_task(self._gossip_loop())
                tg.create_task(self._poll_loop())
                await self.finished.wait()
                raise _Stop
        except* _Stop:
            pass
        finally:
            self._report_rejections()
            await self.checkpointer.close()

    async def _state_loop(self) -> None:
        while True:
            coord = await self.backend.wait_for_new_state()
            async with self._step_lock:
                try:
                    await self._on_state(coord)
                except (BackendError, asyncio.CancelledError):
                    raise
                except Exception:
                    log.exception("internal error; dropping out of this epoch")
                    self._drop_out()
            self._wake.set()
            if coord.run_state in (RunState.Finished,):
                self.events.write("finished", step=coord.progress.step)
                self.finished.set()

    async def _gossip_loop(self) -> None:
        async for peer, data in self.p2p.announcements():
            try:
                ann = open_announcement(data, from_peer=peer)
            except Exception as e:  # AnnouncementError and anything a hostile peer triggers
                # Counted, and logged once per peer: one line per message let a peer flood the log.
                self.rejections.record(Rejection.bad_announcement, peer, str(e))
                continue
            self._on_announcement(ann.sender, ann.payload, peer)

    async def _poll_loop(self) -> None:
        # Woken at once by what can unblock an opportunistic step (our training done, a peer's
        # Finished, a download); the timeout is only a fallback.
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)
            self._wake.clear()
            async with self._step_lock:
                await self._opportunistic()
            self._report_rejections()

    # --- coordinator states -------------------------------------------------------------------

    def _my_index(self, coord: Coordinator) -> int | None:
        i = coord.index_of(self.identity)
        if i is None or coord.epoch_state.clients[i].state is not ClientState.Healthy:
            return None
        return i

    async def _on_state(self, coord: Coordinator) -> None:
        self.coord = coord
        self.sharing.observe(coord)
        state = coord.run_state
        if state is not RunState.Cooldown:
            self.checkpointer.cooldown_over(finished=state is RunState.Finished)
        if state in (RunState.WaitingForMembers, RunState.Paused, RunState.Finished):
            if state is RunState.WaitingForMembers:
                await self._missed_cooldown(coord)
            self._end_epoch()
            return
        if self._my_index(coord) is None:
            if self.view is not None and not self.view.dropped:
                log.warning(
                    "no longer a healthy client of epoch %d; waiting for the next one",
                    coord.progress.epoch,
                )
                self._drop_out()
            return
        if self.view is None or self.view.epoch != coord.progress.epoch:
            await self._missed_cooldown(coord)
            self._end_epoch()
            self.view = EpochView(coord.progress.epoch)
            self._set_peers(coord)
        view = self.view
        if view.dropped:
            return
        if state is not RunState.Warmup and self.trained is None:
            # Listed in an epoch whose warmup this process never saw (restarted mid-epoch with
            # the same key, still listed until a health check): without the epoch's model it can
            # neither train nor apply, so it sits the epoch out instead of failing in _apply.
            log.warning(
                "listed in epoch %d but started after its warmup; waiting for the next one",
                coord.progress.epoch,
            )
            self._drop_out()
            return
        if state is RunState.Warmup:
            if self.trained is None:
                self.trained = await self._load_model(coord)
            view.loaded = True
            return
        if state is RunState.RoundTrain:
            step = coord.progress.step
            height = coord.current_round().height
            if height not in view.rounds or view.rounds[height].step != step:
                await self._start_round(coord, view)
            return
        if state is RunState.RoundWitness:
            self._cancel.set()
            self._note_stragglers(coord, view)
            await self._send_witness(coord, view)
            return
        if state is RunState.Cooldown and not view.cooldown_done:
            view.cooldown_done = True
            self._cancel.set()
            await self._cooldown(coord)

    def _drop_out(self) -> None:
        """Stop training and witnessing for the rest of this epoch. The weights may now miss
        applies the others made, so they are discarded and reloaded when the next epoch starts
        (from the checkpoint the coordinator names) instead of silently diverging."""
        self._cancel.set()
        if self.view is not None:
            self.view.dropped = True
        self.trained = None

    def _set_peers(self, coord: Coordinator) -> None:
        keys = [c.id.p2p_identity for c in coord.epoch_state.clients]
        self.p2p.set_allowed_peers([peer_id_for(k) for k in keys])
        addrs = self.directory.peer_addrs()
        wanted = [a for k in keys if k != self.identity.p2p_identity for a in addrs.get(k, [])]
        if wanted:
            task = asyncio.ensure_future(self.p2p.connect(wanted))
            task.add_done_callback(lambda t: t.exception())

    def _end_epoch(self) -> None:
        self._cancel.set()
        for t in self._fetches:
            t.cancel()
        self._fetches.clear()
        self.view = None
        self.prev_self = None

    # --- rounds -------------------------------------------------------------------------------

    async def _load_model(self, coord: Coordinator) -> Trained:
        """Load the run's model: from the previous epoch's clients when the coordinator says
        the model lives with peers (P2P checkpoints), otherwise from the checkpoint it names."""
        received = None
        if isinstance(coord.llm.checkpoint, P2PCheckpoint | P2PGcsCheckpoint):
            received = await self.sharing.fetch(coord)
        trained = await asyncio.to_thread(self._load, coord, received)
        digest = await asyncio.to_thread(model_hash, trained.trainer.model)
        if received is not None:
            log.info(
                "model of step %d fetched from %d peers in %.1f s",
                received.manifest.step,
                len(received.sources),
                received.seconds,
            )
        self.events.write(
            "model_loaded",
            step=coord.progress.step,
            source="p2p" if received is not None else trained.source,
            peers=sorted(received.sources) if received is not None else [],
            seconds=round(received.seconds, 3) if received is not None else None,
            model_hash=digest,
        )
        return trained

    async def _start_round(self, coord: Coordinator, view: EpochView) -> None:
        self.sharing.clear()
        state = round_state_for(coord)
        view.rounds[state.height] = state
        for h in [h for h in view.rounds if h < state.height - 2]:
            del view.rounds[h]
        # The previous round's training must be over (finished, or cancelled and its lookahead
        # undone) before the apply: a training thread still running would restore its pre-
        # lookahead backup over the applied weights, and this client alone would lose the apply.
        if self._training is not None and not self._training.done():
            self._cancel.set()
            await asyncio.wait([self._training])
        await self._apply(coord, view, state)
        await self._health_check(coord, view)
        self._cancel = threading.Event()
        mine = state.batch_of(self.identity) if state.trains else None
        if mine is None:
            self.prev_self = None
            if state.trains and self.trained is not None:
                lr = round_lrs(coord, state.step, state.height).lr
                await asyncio.to_thread(self.trained.trainer.sit_out, lr=lr)
            return
        self._training = asyncio.create_task(self._train(coord, state, mine))

    async def _apply(self, coord: Coordinator, view: EpochView, state: RoundState) -> None:
        """Apply round h−2 by witness consensus, then log the parameter hash (every round, so
        agreement between clients is checkable at every step)."""
        assert self.trained is not None
        applied = view.rounds.get(state.height - 2)
        prev = coord.previous_round()
        payloads: list[Payload] = []
        if applied is not None and prev is not None and state.height >= 2:
            chosen = results_to_apply(applied, prev.witnesses, coord)
            deadline = time.monotonic() + self.apply_deadline_s
            while any(r.payload is None for r in self._current(applied, chosen)):
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            for res in self._current(applied, chosen):
                if res.payload is None:
                    log.warning(
                        "skipping batch %s of step %d: payload not downloaded in time",
                        res.batch,
                        applied.step,
                    )
                    continue
                payloads.append(decode_payload(res.payload, self.trained.spec))
        lr = round_lrs(coord, state.step, state.height).lr
        if payloads:
            await asyncio.to_thread(self.trained.trainer.apply_step, payloads, lr=lr)
        digest = await asyncio.to_thread(model_hash, self.trained.trainer.model)
        self.events.write(
            "apply",
            step=state.step,
            height=state.height,
            applied_step=applied.step if applied is not None and payloads else None,
            batches=len(payloads),
            model_hash=digest,
        )

    @staticmethod
    def _current(applied: RoundState, chosen: list[ReceivedResult]) -> list[ReceivedResult]:
        return [applied.results.get(r.batch, r) for r in chosen]

    async def _train(self, coord: Coordinator, state: RoundState, batch: BatchId) -> None:
        assert self.trained is not None
        trained, cancel = self.trained, self._cancel
        lrs = round_lrs(coord, state.step, state.height)
        t0 = time.perf_counter()
        try:
            tokens = await asyncio.to_thread(trained.data.get_samples, batch)
            out = await asyncio.to_thread(
                trained.trainer.train_step,
                tokens,
                step=state.step,
                lr=lrs.lr,
                prev_lr=lrs.prev_lr,
                prev_self_results=self.prev_self,
                zero_optim=lrs.zero_optim,
                cancel=cancel,
                batch_id=(batch.start, batch.end),
            )
        except TrainingCancelled:
            log.warning("training of step %d cancelled; lookahead undone", state.step)
            self.prev_self = None
            return
        self.prev_self = out.self_result
        digest = payload_hash(state.step, batch.start, batch.end, out.payload)
        blob = self.p2p.serve(out.payload)
        commitment = make_commitment(self.key, digest)
        state.results[batch] = ReceivedResult(self.identity, batch, digest, out.payload)
        ann = TrainingResult(
            step=state.step,
            batch_start=batch.start,
            batch_end=batch.end,
            commitment=WireCommitment.of(commitment),
            blob_hash=blob,
            blob_size=len(out.payload),
            nonce=0,
        )
        await self.p2p.announce(sign_announcement(self.key, ann))
        self._wake.set()
        self.events.write(
            "train",
            step=state.step,
            batch=[batch.start, batch.end],
            loss=out.loss,
            seconds=round(time.perf_counter() - t0, 4),
            compute_s=round(out.seconds, 4),
            payload_bytes=len(out.payload),
        )

    async def _health_check(self, coord: Coordinator, view: EpochView) -> None:
        """A client that witnessed the previous round reports the trainers that a quorum of its
        witnesses agree delivered nothing (never itself: a forged view could name it too)."""
        prev = coord.previous_round()
        if prev is None or coord.current_round().height < 2 or coord.epoch_state.first_round:
            return
        prev_clients = coord.previous_round_clients()
        sel = coord.committee_selection(prev)
        me = next((i for i, c in enumerate(prev_clients) if c == self.identity), None)
        if me is None or not sel.get_witness(me).witness:
            return
        report = []
        for i, who in enumerate(prev_clients):
            idx = coord.index_of(who)
            if idx is None or coord.epoch_state.clients[idx].state is not ClientState.Healthy:
                continue
            if who != self.identity and coord.trainer_ejectable(who):
                report.append((who, sel.get_committee(i)))
        if report:
            log.warning("health check: reporting %s", [w.hex() for w, _ in report])
            await self.backend.send_health_check(report)

    # --- gossip -------------------------------------------------------------------------------

    def _on_announcement(self, sender: bytes, payload: Any, peer: str) -> None:
        coord, view = self.coord, self.view
        if coord is None or view is None:
            return
        # Coordinators refuse a P2P key held by two wallets, but should an epoch list it twice
        # (a coordinator from before that rule), list order must not decide whose it is: the
        # first holder's assignment used to decide whether the key owner's results counted
        # (issue 12, finding 4). A result counts for the holder its batch is assigned to.
        holders = [c.id for c in coord.epoch_state.clients if c.id.p2p_identity == sender]
        if not holders:
            self.rejections.record(Rejection.not_epoch_client, peer, type(payload).__name__)
            return
        member = holders[0]
        if isinstance(payload, ModelAvailable):
            self.sharing.on_offer(sender, payload, coord)
            return
        if isinstance(payload, Finished):
            if payload.warmup:
                view.ready.add(sender)
            else:
                view.stragglers.difference_update(holders)
                for st in view.rounds.values():
                    if st.step == payload.step:
                        st.finished.update(holders)
            self._wake.set()
            return
        if not isinstance(payload, TrainingResult) or view.dropped:
            return  # a client sitting the epoch out takes no results, and refuses none either
        state = next((s for s in view.rounds.values() if s.step == payload.step), None)
        batch = BatchId(payload.batch_start, payload.batch_end)
        if state is None:
            # Not silent: a result that arrives before this client starts its round is lost
            # (counted as future), and so is one for a round already forgotten.
            kind = (
                Rejection.future_result
                if payload.step >= coord.progress.step
                else Rejection.stale_result
            )
            detail = f"step {payload.step}; this client is at step {coord.progress.step}"
            self.rejections.record(kind, peer, detail)
            return
        assigned = state.assignment.get(batch)
        if assigned is None or assigned not in holders:
            detail = f"batch {batch} of step {payload.step}"
            self.rejections.record(Rejection.other_batch, peer, detail)
            return
        member = assigned
        if batch in state.results:
            return  # a repeat of a result already taken: nothing is lost
        commitment = payload.commitment.to_commitment()
        if not verify_commitment(sender, commitment):
            detail = f"batch {batch} of step {payload.step}"
            self.rejections.record(Rejection.bad_commitment, peer, detail)
            return
        if self.trained is None:
            return  # no model loaded (sitting this epoch out): nothing to verify payloads with
        res = ReceivedResult(member, batch, commitment.data_hash, None)
        state.results[batch] = res
        task = asyncio.create_task(self._fetch(state, res, payload, peer))
        self._fetches.add(task)
        task.add_done_callback(self._fetches.discard)

    async def _fetch(
        self, state: RoundState, res: ReceivedResult, ann: TrainingResult, peer: str
    ) -> None:
        assert self.trained is not None and self.coord is not None
        others = [
            peer_id_for(c.id.p2p_identity)
            for c in self.coord.epoch_state.clients
            if c.id != self.identity
        ]
        peers = [peer, *[p for p in others if p != peer]]
        size = min(ann.blob_size, self.trained.spec.max_bytes)
        try:
            data = await self.p2p.fetch(
                ann.blob_hash, from_any_of=peers, max_size=size, timeout=120.0
            )
        except Exception as e:
            log.warning("download of %s (step %d) failed: %s", res.batch, state.step, e)
            state.results.pop(res.batch, None)
            return
        full = ReceivedResult(res.trainer, res.batch, res.data_hash, data)
        if not verify_result(full, state.step, self.trained.spec):
            detail = f"batch {res.batch} of step {state.step}"
            self.rejections.record(Rejection.bad_payload, peer, detail)
            return
        state.results[res.batch] = full
        self._wake.set()

    # --- rejections ---------------------------------------------------------------------------

    def rejection_counts(self) -> dict[str, int]:
        """Everything refused from peers so far, by kind: the daemon's and the host's."""
        return merge_counts([self.rejections.counts(), self.p2p.counters.rejections])

    def _report_rejections(self) -> None:
        """Write the counts to the event log when they changed. ``pid`` and ``since`` tell one
        process's cumulative counts from the next one's when a client restarts into the same log.
        """
        counts = self.rejection_counts()
        if counts == self._reported:
            return
        self._reported = counts
        self.events.write("rejections", pid=os.getpid(), since=self._process_start, counts=counts)

    # --- opportunistic steps ------------------------------------------------------------------

    async def _opportunistic(self) -> None:
        coord, view = self.coord, self.view
        if coord is None or view is None or view.dropped:
            return
        if coord.run_state is RunState.Warmup and view.loaded:
            await self._warmup_ready(coord, view)
        elif coord.run_state is RunState.RoundTrain:
            state = view.rounds.get(coord.current_round().height)
            if state is None or state.step != coord.progress.step:
                return
            mine = state.batch_of(self.identity) if state.trains else None
            mine_done = (
                mine is None
                or mine in state.results
                or self._training is None
                or self._training.done()
            )
            prev = view.rounds.get(state.height - 1)
            waiting_on = prev is None or prev.all_received(ignore=view.stragglers)
            if not state.sent_finished and mine_done and waiting_on:
                state.sent_finished = True
                state.finished.add(self.identity)
                await self.p2p.announce(
                    sign_announcement(self.key, Finished(step=state.step, warmup=False))
                )
            everyone = {c.id for c in coord.epoch_state.clients if c.state is ClientState.Healthy}
            if state.sent_finished and everyone - view.stragglers <= state.finished:
                await self._send_witness(coord, view)

    def _note_stragglers(self, coord: Coordinator, view: EpochView) -> None:
        """At the end of a round that hit its train timeout (fewer witnesses than elected), the
        members that never announced Finished become stragglers (see ``EpochView.stragglers``)."""
        rnd = coord.current_round()
        state = view.rounds.get(rnd.height)
        if state is None or state.closed or state.step != coord.progress.step:
            return
        state.closed = True
        if len(rnd.witnesses) >= coord.witness_count():
            return
        late = {
            c.id
            for c in coord.epoch_state.clients
            if c.state is ClientState.Healthy and c.id not in state.finished
        } - {self.identity}
        if late - view.stragglers:
            log.info(
                "round %d timed out; not waiting for %s until they announce Finished again",
                rnd.height,
                sorted(w.hex() for w in late - view.stragglers),
            )
        view.stragglers |= late

    async def _warmup_ready(self, coord: Coordinator, view: EpochView) -> None:
        everyone = {c.id.p2p_identity for c in coord.epoch_state.clients}
        if not everyone <= view.ready:
            await self.sharing.announce(coord.progress.step)
        if not view.sent_ready:
            view.sent_ready = True
            view.ready_since = time.monotonic()
            view.ready.add(self.identity.p2p_identity)
            await self.p2p.announce(sign_announcement(self.key, Finished(step=0, warmup=True)))
        waited = time.monotonic() - view.ready_since > WARMUP_GRACE_S
        if not view.sent_warmup_witness and (everyone <= view.ready or waited):
            i = self._my_index(coord)
            if i is None:
                return
            view.sent_warmup_witness = True
            proof = WitnessProof(position=i, index=i, witness=False)
            await self.backend.send_warmup_witness(Witness(proof, Bloom.empty(), Bloom.empty()))

    async def _send_witness(self, coord: Coordinator, view: EpochView) -> None:
        i = self._my_index(coord)
        rnd = coord.current_round()
        state = view.rounds.get(rnd.height)
        if i is None or state is None or state.sent_witness:
            return
        proof = coord.committee_selection(rnd).get_witness(i)
        if not proof.witness:
            return
        state.sent_witness = True
        seed = bloom_seed_for(self.identity, rnd, os.urandom(8))
        witness = build_witness(proof, view.rounds.get(rnd.height - 1), seed)
        await self.backend.send_witness(witness, WitnessMetadata(step=state.step))

    # --- cooldown -----------------------------------------------------------------------------

    async def _missed_cooldown(self, coord: Coordinator) -> None:
        """The epoch we trained in ended without us seeing its Cooldown (coalesced states): our
        weights have not changed since its last round, so serve them to joiners now."""
        view, trained = self.view, self.trained
        if view is None or view.dropped or view.cooldown_done or not view.rounds or not trained:
            return
        view.cooldown_done = True
        if self._training is not None and not self._training.done():
            await asyncio.wait([self._training])
        await self.sharing.snapshot(trained.trainer.model, trained.files, coord.progress.step)

    async def _cooldown(self, coord: Coordinator) -> None:
        """Serve the epoch's final weights to joiners; an elected checkpointer also saves them
        (and uploads, then reports) in the background."""
        i = self._my_index(coord)
        if i is None or self.trained is None:
            return
        if self._training is not None and not self._training.done():
            await asyncio.wait([self._training])
        trained = self.trained
        model = trained.trainer.model
        await self.sharing.snapshot(model, trained.files, coord.progress.step)
        if not self.checkpointer.enabled or i not in coord.checkpointer_indices():
            return
        tensors = await asyncio.to_thread(state_tensors, model)
        digest = await asyncio.to_thread(model_hash, model)
        self.checkpointer.start(
            run_id=coord.run_id,
            step=coord.progress.step - 1,
            epoch=coord.progress.epoch,
            index=i,
            tensors=tensors,
            files=trained.files,
            model_hash=digest,
        )


class _Stop(Exception):
    """Ends the daemon's task group once the run is finished."""
