"""The coordinator's phase changes: ``tick`` and the transitions it and the handlers share.

One ``_tick_<phase>`` method per RunState, and every phase change goes through
:meth:`CoordinatorTransitions._change_state`. Time (``now``) and randomness (``seed``) are
arguments. The Rust program keeps the same transitions in ``core/coordinator.rs``.
"""

from __future__ import annotations

from collections.abc import Sequence

from psyche.coordinator import lost_work
from psyche.coordinator.queries import CoordinatorState, E
from psyche.coordinator.types import (
    MAX_CLIENTS,
    NUM_STORED_ROUNDS,
    TICKED,
    Client,
    ClientState,
    CoordinatorException,
    EpochState,
    RunState,
    TickResult,
)
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import (
    Checkpoint,
    DummyCheckpoint,
    GcsCheckpoint,
    HubCheckpoint,
    P2PCheckpoint,
    P2PGcsCheckpoint,
)
from psyche.protocol.model import LLM


class CoordinatorTransitions(CoordinatorState):
    __slots__ = ()

    def _change_state(self, now: int, state: RunState) -> None:
        assert state is not self.run_state, f"change_state to the same state {state.name}"
        self.run_state = state
        self.run_state_start_unix_timestamp = now

    def _move_clients_to_exited(self, height: int) -> None:
        es = self.epoch_state
        kept: list[Client] = []
        remap: dict[int, int] = {}
        for i, c in enumerate(es.clients):
            if c.state is ClientState.Healthy:
                remap[i] = len(kept)
                kept.append(c)
            else:
                c.exited_height = height
                c.exited_index = i
                es.exited_clients.append(c)
        if len(kept) == len(es.clients):
            return
        es.clients = kept
        if self.run_state is RunState.Warmup:
            # Warmup witnesses name indices; keep them pointing at the same clients.
            rnd = self.current_round()
            rnd.witnesses = [w for w in rnd.witnesses if w.proof.index in remap]
            for w in rnd.witnesses:
                p = w.proof
                w.proof = type(p)(position=remap[p.index], index=remap[p.index], witness=p.witness)

    def _withdraw_all(self) -> None:
        for c in self.epoch_state.clients:
            if c.state is ClientState.Healthy:
                c.state = ClientState.Withdrawn

    def _start_waiting_for_members(self, now: int) -> None:
        if self.progress.step < self.config.total_steps:
            self._change_state(now, RunState.WaitingForMembers)
        else:
            self._change_state(now, RunState.Finished)

    def _start_round_train(self, now: int, seed: int) -> None:
        es = self.epoch_state
        if es.first_round:
            es.rounds_head = 0
            rnd = es.rounds[0]
            rnd.height = 0
            rnd.data_index = self.progress.epoch_start_data_index
        else:
            prev = self.current_round()
            es.rounds_head = (es.rounds_head + 1) % NUM_STORED_ROUNDS
            rnd = es.rounds[es.rounds_head]
            rnd.height = prev.height + 1
            rnd.data_index = prev.data_index + lost_work.fresh_size(self, prev)
        rnd.clients_len = len(es.clients)
        rnd.retries = []
        if not self.last_step_set():
            rnd.retries = lost_work.take_retries(
                es, len(es.clients), self.batch_size_for_round(rnd)
            )
        rnd.tie_breaker_tasks = 0
        rnd.random_seed = seed
        rnd.witnesses = []
        self._change_state(now, RunState.RoundTrain)

    def _start_cooldown(self, now: int) -> None:
        self.current_round().witnesses = []
        self._change_state(now, RunState.Cooldown)

    # --- tick (docs/protocol.md, "Tick rules") --------------------------------------------------

    def tick(self, pending: Sequence[NodeIdentity] | None, now: int, seed: int) -> TickResult:
        state = self.run_state
        if state.halted:
            raise CoordinatorException(E.Halted, f"run is {state.name}")
        if state is RunState.WaitingForMembers:
            return self._tick_waiting_for_members(pending, now)
        if state is RunState.Warmup:
            return self._tick_warmup(now, seed)
        if state is RunState.RoundTrain:
            if self.check_timeout(now, self.config.max_round_train_time):
                self._change_state(now, RunState.RoundWitness)
            return TICKED
        if state is RunState.RoundWitness:
            return self._tick_round_witness(now, seed)
        return self._tick_cooldown(now)

    def _tick_waiting_for_members(
        self, pending: Sequence[NodeIdentity] | None, now: int
    ) -> TickResult:
        if pending is None:
            return TICKED
        unique = list(dict.fromkeys(pending))
        if len(unique) < self.config.init_min_clients or not self.check_timeout(
            now, self.config.waiting_for_members_extra_time
        ):
            return TICKED
        es = self.epoch_state
        self._move_clients_to_exited(self.current_round().height)
        survivors = {c.id for c in es.clients}
        if not any(p in survivors for p in unique):
            self._checkpoint_to_central_store()
        cold = es.cold_start_epoch
        self.epoch_state = EpochState(
            clients=[Client(id=p) for p in unique[:MAX_CLIENTS]],
            first_round=True,
            start_step=self.progress.step,
            start_timestamp=now,
            cold_start_epoch=cold,
            lost=es.lost,
        )
        self._change_state(now, RunState.Warmup)
        return TICKED

    def _tick_warmup(self, now: int, seed: int) -> TickResult:
        if self.check_timeout(now, self.config.warmup_time):
            self._start_round_train(now, seed)
        else:
            self._move_clients_to_exited(0)
        if len(self.epoch_state.clients) < self.config.min_clients:
            self._start_waiting_for_members(now)
            return TickResult(epoch_end=False)
        return TICKED

    def _tick_round_witness(self, now: int, seed: int) -> TickResult:
        if not self.check_timeout(now, self.config.round_witness_time):
            return TICKED
        es = self.epoch_state
        es.first_round = False
        self.progress.step += 1
        rnd = self.current_round()
        n_w = len(rnd.witnesses)
        self._act_on_verdicts()
        lost_work.queue_leaving_work(self)
        self._move_clients_to_exited(rnd.height)
        if n_w == 0:
            # Without witnesses nobody can tell which clients are alive.
            self._withdraw_all()
            self._start_cooldown(now)
            return TICKED
        step = self.progress.step
        wind_down = (
            self.check_epoch_timeout(now) or step >= self.config.total_steps or self.pending_pause
        )
        if wind_down and not self.last_step_set():
            es.last_step = step + 2
        if self.last_step_set() and step >= es.last_step:
            self._start_cooldown(now)
            return TICKED
        if len(es.clients) < self.config.min_clients or n_w < self.config.quorum(n_w):
            self._start_cooldown(now)
            return TICKED
        self._start_round_train(now, seed)
        return TICKED

    def _act_on_verdicts(self) -> None:
        """At the end of the current round, before clients move out: eject the trainers whose
        previous-round result a quorum of verifiers rejected (their interval is queued again:
        clients leave the result out of the apply) and the verifiers a quorum contradicted."""
        prev = self.previous_round()
        if prev is None:
            return
        outcome = self.verdict_outcome(self.current_round(), prev)
        if not outcome.rejected and not outcome.false_accusers:
            return
        intervals = lost_work.intervals_of(self, prev)
        for who in outcome.rejected:
            if self._eject(who):
                lost_work.push_lost(self.epoch_state, intervals.get(who))
        for who in outcome.false_accusers:
            self._eject(who)

    def _eject(self, who: NodeIdentity) -> bool:
        """Eject ``who`` if it is still an epoch client that has not been ejected; a client that
        withdrew is ejected too, so leaving does not escape the slashing."""
        i = self.index_of(who)
        if i is None:
            return False
        c = self.epoch_state.clients[i]
        if c.state not in (ClientState.Healthy, ClientState.Withdrawn):
            return False
        c.state = ClientState.Ejected
        return True

    def _tick_cooldown(self, now: int) -> TickResult:
        if not self.check_timeout(now, self.config.cooldown_time):
            return TICKED
        return self._end_cooldown(now)

    def _end_cooldown(self, now: int) -> TickResult:
        rnd = self.current_round()
        self.progress.epoch_start_data_index = rnd.data_index + lost_work.fresh_size(self, rnd)
        self.progress.epoch += 1
        self._move_clients_to_exited(rnd.height)
        self._checkpoint_to_p2p()
        if self.pending_pause:
            self._withdraw_all()
            self._change_state(now, RunState.Paused)
            self.pending_pause = False
            self.epoch_state.cold_start_epoch = True
        else:
            self._start_waiting_for_members(now)
            self.epoch_state.cold_start_epoch = False
        return TickResult(epoch_end=True)

    def _set_checkpoint(self, ck: Checkpoint) -> None:
        llm = self.llm
        self.model = LLM(
            max_seq_len=llm.max_seq_len,
            cold_start_warmup_steps=llm.cold_start_warmup_steps,
            architecture=llm.architecture,
            checkpoint=ck,
            data_type=llm.data_type,
            data_location=llm.data_location,
            lr_schedule=llm.lr_schedule,
            optimizer=llm.optimizer,
        )

    def _checkpoint_to_p2p(self) -> None:
        ck = self.llm.checkpoint
        if isinstance(ck, HubCheckpoint | DummyCheckpoint):
            self._set_checkpoint(P2PCheckpoint(ck.repo))
        elif isinstance(ck, GcsCheckpoint):
            self._set_checkpoint(P2PGcsCheckpoint(ck.repo))

    def _checkpoint_to_central_store(self) -> None:
        ck = self.llm.checkpoint
        if isinstance(ck, P2PCheckpoint):
            self._set_checkpoint(HubCheckpoint(ck.repo))
        elif isinstance(ck, P2PGcsCheckpoint):
            self._set_checkpoint(GcsCheckpoint(ck.repo))
