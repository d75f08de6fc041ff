"""The round engine: follows coordinator states and runs one step at a time.

The only round engine of the project: the client process (``psyche-*-client train``), the
simulated run of ``psyche demo`` and the engine's tests all drive this class; they differ only in
the parts they hand it (docs/architecture.md, "One round, file by file").

Shape: three loops in one event loop (coordinator states, gossip, and a wake-up for
opportunistic work with a 500 ms fallback) and worker threads for blocking work (model loading,
data fetching, training, applying). A round is identified by (epoch, step), never by remembered
phase names alone, so a state the engine never saw cannot desynchronise it. The active step is
one of

* :class:`~psyche.daemon.warmup.WarmupStep` (Warmup): load the model, report ready;
* :class:`~psyche.daemon.training.TrainingStep` (RoundTrain of height h): apply h−2, train;
* :class:`~psyche.daemon.witnessing.WitnessStep` (RoundWitness): stop training, witness;
* :class:`~psyche.daemon.cooldown.CooldownStep` (Cooldown): serve and checkpoint the weights;

each started from the previous one's result (the model kit, the previous training step). An
internal error drops the client out of the epoch cleanly (it stops training and witnessing,
forgets its weights) and it rejoins in the next epoch. After every apply the engine logs the
parameter hash, so tests can prove that honest clients agree bit for bit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

from psyche.backends.base import BackendError
from psyche.checkpoint.p2p import PeerFetchError
from psyche.coordinator import Coordinator, RunState
from psyche.daemon.cooldown import CooldownStep, missed_cooldown
from psyche.daemon.epoch import EpochView
from psyche.daemon.gossip import GossipRouter
from psyche.daemon.parts import ClientParts, Holdings, PeerDirectory, healthy_index
from psyche.daemon.relaying import RelayKeeper
from psyche.daemon.rounds import round_state_for
from psyche.daemon.training import MissingConsensusResult, TrainingStep
from psyche.daemon.warmup import WarmupStep
from psyche.daemon.witnessing import WitnessStep
from psyche.data.provider import DataError
from psyche.events import FinishedEvent, RejectionsEvent
from psyche.p2p.errors import NodeStopped
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.rejections import merge_counts
from psyche.training.errors import ModelLoadError

__all__ = ["RoundEngine", "Step"]

log = logging.getLogger("psyche.daemon")

POLL_S = 0.5

Step = WarmupStep | TrainingStep | WitnessStep | CooldownStep


class RoundEngine:
    def __init__(self, parts: ClientParts, directory: PeerDirectory) -> None:
        self.parts = parts
        self.directory = directory
        self.held = Holdings()
        self.step: Step | None = None
        self.gossip = GossipRouter(parts, self.held)
        self.finished = asyncio.Event()
        self._wake = parts.woken
        self._lock = asyncio.Lock()
        self._reported: dict[str, int] = {}
        self._dialled: set[str] = set()
        self._process_start = round(time.time(), 3)
        self.relay = RelayKeeper(parts.transport, directory, parts.identity.p2p_identity)

    def wake(self) -> None:
        self._wake.set()

    # --- loops --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the run until it is Finished (or the backend fails)."""
        await self.directory.publish_p2p_addrs(self.parts.transport.listen_addrs)
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
            self.report_rejections()
            if self.held.epoch is not None:
                self.held.epoch.cancel_downloads()
            if isinstance(self.step, TrainingStep):
                self.step.cancel()
            await self.relay.close()
            await self.parts.checkpointer.close()
            if self.parts.evals is not None:
                await self.parts.evals.close()

    async def _state_loop(self) -> None:
        while True:
            coord = await self.parts.backend.wait_for_new_state()
            async with self._lock:
                try:
                    await self.on_state(coord)
                except (BackendError, asyncio.CancelledError):
                    raise
                except MissingConsensusResult as e:
                    log.warning("%s; dropping out of this epoch", e)
                    self.drop_out()
                except PeerFetchError as e:
                    # Peers that stop serving (their epoch started) or cannot be reached are
                    # an expected outcome for a joiner on slow links, not an internal error.
                    log.warning(
                        "could not load the model from peers (%s); sitting this epoch out, "
                        "the next warmup tries again",
                        e,
                    )
                    self.drop_out()
                except (ModelLoadError, DataError) as e:
                    # The run's model or data cannot be had here (a path, a bucket, a format):
                    # the user's to fix, so one line saying what, not an internal traceback.
                    log.error("cannot load this run's model or data: %s; sitting this epoch out", e)
                    self.drop_out()
                except Exception:
                    log.exception("internal error; dropping out of this epoch")
                    self.drop_out()
            self._wake.set()
            if coord.run_state is RunState.Finished:
                self.parts.events.write(FinishedEvent(step=coord.progress.step))
                self.finished.set()

    async def _gossip_loop(self) -> None:
        await self.gossip.run()
        # The transport's announcements end only when its host is gone (the libp2p host process
        # died, or was killed). Without it this client can neither hear nor tell its peers
        # anything, so going on would only sit out every epoch; ending lets a supervisor (the
        # image's entrypoint) start a new one.
        raise NodeStopped("the p2p host process exited; this client cannot go on without it")

    async def _poll_loop(self) -> None:
        # Woken at once by what can unblock an opportunistic step (our training done, a peer's
        # Finished, a download); the timeout is only a fallback.
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await self._wake.wait()
            self._wake.clear()
            async with self._lock:
                await self.poll()
            self.report_rejections()

    # --- one coordinator state ----------------------------------------------------------------

    async def on_state(self, coord: Coordinator) -> None:
        held, parts = self.held, self.parts
        held.coord = coord
        parts.sharing.observe(coord)
        state = coord.run_state
        if state is not RunState.Cooldown:
            parts.checkpointer.cooldown_over(finished=state is RunState.Finished)
        if state in (RunState.WaitingForMembers, RunState.Paused, RunState.Finished):
            if state is RunState.WaitingForMembers:
                await self._missed_cooldown(coord)
            self._end_epoch()
            return
        if healthy_index(parts, coord) is None:
            if held.epoch is not None and not held.epoch.dropped:
                log.warning(
                    "no longer a healthy client of epoch %d; waiting for the next one",
                    coord.progress.epoch,
                )
                self.drop_out()
            return
        if held.epoch is None or held.epoch.epoch != coord.progress.epoch:
            await self._missed_cooldown(coord)
            self._end_epoch()
            held.epoch = EpochView(coord.progress.epoch)
            self._set_peers(coord)
            if state is RunState.Warmup:
                self.step = WarmupStep(parts, held.epoch)
        epoch = held.epoch
        if epoch.dropped:
            return
        if state is not RunState.Warmup and held.kit is None:
            # Listed in an epoch whose warmup this process never saw (restarted mid-epoch with
            # the same key, still listed until a health check): without the epoch's model it can
            # neither train nor apply, so it sits the epoch out.
            log.warning(
                "listed in epoch %d but started after its warmup; waiting for the next one",
                coord.progress.epoch,
            )
            self.drop_out()
            return
        await self._enter(coord, state, epoch)

    async def _enter(self, coord: Coordinator, state: RunState, epoch: EpochView) -> None:
        """Start the step ``state`` calls for, from the active one, unless it runs already."""
        parts, held, step = self.parts, self.held, self.step
        if state is RunState.Warmup:
            if isinstance(step, WarmupStep):
                held.kit = await step.load(coord, held.kit)
            return
        assert held.kit is not None
        previous = _training_of(step)
        if state is RunState.RoundTrain:
            height = coord.current_round().height
            if previous is not None and (previous.state.height, previous.state.step) == (
                height,
                coord.progress.step,
            ):
                return
            rs, opened = round_state_for(coord), self.gossip.round_opened
            self.step = TrainingStep(parts, epoch, held.kit, rs, previous, on_open=opened)
            await self.step.start(coord)
        elif state is RunState.RoundWitness:
            if isinstance(step, TrainingStep):
                self.step = WitnessStep(parts, epoch, step)
                await self.step.begin(coord)
        elif state is RunState.Cooldown and not epoch.cooldown_done:
            self.step = CooldownStep(parts, epoch, held.kit, previous)
            await self.step.run(coord)

    async def poll(self) -> None:
        """Opportunistic work of the active step (ready signals, Finished, early witness)."""
        coord, epoch, step = self.held.coord, self.held.epoch, self.step
        if coord is None or epoch is None or epoch.dropped:
            return
        self._dial_members(coord)
        self.relay.poll(coord)
        if coord.run_state in (RunState.RoundTrain, RunState.RoundWitness):
            training = coord.run_state is RunState.RoundTrain
            height = coord.current_round().height
            now = self.parts.clock()
            others, transport = self.gossip.members(coord).others, self.parts.transport

            def not_asked(blob_hash: bytes) -> frozenset[str]:
                return frozenset(others) - transport.askers(blob_hash)

            due = epoch.outbox.due(now=now, height=height, training=training, not_asked=not_asked)
            for resend in due:
                if resend.to is None:
                    await transport.announce(resend.data)
                else:
                    await transport.tell(resend.to, resend.data)
        if (coord.run_state is RunState.Warmup and isinstance(step, WarmupStep)) or (
            coord.run_state is RunState.RoundTrain and isinstance(step, TrainingStep)
        ):
            await step.poll(coord)

    # --- epochs -------------------------------------------------------------------------------

    def drop_out(self) -> None:
        """Stop training and witnessing for the rest of this epoch. The weights may now miss
        applies the others made, so they are discarded and reloaded when the next epoch starts
        (from the checkpoint the coordinator names) instead of silently diverging."""
        training = _training_of(self.step)
        if training is not None:
            training.cancel()
        if self.held.epoch is not None:
            self.held.epoch.dropped = True
            self.held.epoch.cancel_downloads()
        self.held.kit = None

    async def _missed_cooldown(self, coord: Coordinator) -> None:
        held = self.held
        await missed_cooldown(self.parts, coord, held.epoch, held.kit, _training_of(self.step))

    def _end_epoch(self) -> None:
        training = _training_of(self.step)
        if training is not None:
            training.cancel()
        if self.held.epoch is not None:
            self.held.epoch.cancel_downloads()
            self.gossip.epoch_ended(self.held.epoch)
        self.held.epoch = None
        self.step = None

    def _set_peers(self, coord: Coordinator) -> None:
        keys = [c.id.p2p_identity for c in coord.epoch_state.clients]
        self.parts.transport.set_allowed_peers([peer_id_for(k) for k in keys])
        self._dialled.clear()
        self._dial_members(coord)

    def _dial_members(self, coord: Coordinator) -> None:
        """Dial the epoch's members at the addresses the directory knows and that were not
        dialled yet this epoch. Called at every poll, not only when the epoch starts: a member
        whose address arrives later (it started its P2P node after the epoch began) is dialled
        as soon as it is known, so the mesh never depends on who published first."""
        addrs = self.directory.peer_addrs()
        me = self.parts.identity.p2p_identity
        wanted = [
            a
            for c in coord.epoch_state.clients
            if c.id.p2p_identity != me
            for a in addrs.get(c.id.p2p_identity, [])
            if a not in self._dialled
        ]
        if wanted:
            self._dialled.update(wanted)
            task = asyncio.ensure_future(self.parts.transport.connect(wanted))
            task.add_done_callback(lambda t: t.exception())

    # --- observation --------------------------------------------------------------------------

    def idle(self) -> bool:
        """Nothing in progress and nothing asked for: no state or poll being handled (an apply
        waiting for downloads included), no training, no checkpoint being saved. The simulated
        run advances its clock only when every engine is idle, so simulated time never passes
        while real work is being done. Downloads do not count: a stalled one must not stop the
        clock, and the apply that needs one waits for it under its own deadline."""
        training = _training_of(self.step)
        return (
            not self._lock.locked()
            and not self._wake.is_set()
            and (training is None or not training.training)
            and not self.parts.checkpointer.busy
        )

    def rejection_counts(self) -> dict[str, int]:
        """Everything refused from peers so far, by kind: the engine's and the transport's."""
        counts = self.parts.transport.counters.rejections
        return merge_counts([self.parts.rejections.counts(), counts])

    def report_rejections(self) -> None:
        """Write the counts to the event log when they changed. ``pid`` and ``since`` tell one
        process's cumulative counts from the next one's when a client restarts into the same log.
        """
        counts = self.rejection_counts()
        if counts == self._reported:
            return
        self._reported = counts
        since = self._process_start
        event = RejectionsEvent(pid=os.getpid(), since=since, counts=counts)
        self.parts.events.write(event)


def _training_of(step: Step | None) -> TrainingStep | None:
    """The training step behind the active step (the witness phase keeps its round's)."""
    if isinstance(step, TrainingStep):
        return step
    if isinstance(step, WitnessStep) and isinstance(step.training, TrainingStep):
        return step.training
    if isinstance(step, CooldownStep):
        return step.last
    return None


class _Stop(Exception):
    """Ends the engine's task group once the run is finished."""
