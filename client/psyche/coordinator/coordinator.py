"""The coordinator state machine (SPEC §1.6–1.8), pure and deterministic.

One ``tick_<phase>`` method per RunState and every phase change through :meth:`_change_state`. Time
(``now``, unix seconds) and randomness (``seed``, u64) are arguments; nothing here reads a clock or
a global RNG, so the TCP server, the Solana program (Rust mirror) and clients predicting the next
state all compute the same thing. Every public method either applies completely or raises
:class:`CoordinatorException` with the state untouched (handlers validate before they mutate).

Deviations from the reference, each recorded in docs/protocol.md:

* ``warmup_witness`` and ``witness`` require the sender to be the healthy epoch client at the index
  it claims.
* Reaching ``total_steps`` or a pending pause winds the epoch down through the two drain rounds,
  as the epoch timeout does, so the last two trained rounds are applied.
* At the start of Cooldown one third of the epoch's clients (at least one) are elected
  checkpointers from the round seed; only they may ``checkpoint``, only in Cooldown, and the first
  accepted checkpoint ends Cooldown at once.
* Health checks eject (``Ejected``), and the previous round's client list is rebuilt exactly.
* No lost work: intervals of ejected or leaving clients are queued and re-assigned in later
  rounds (``Round.retries``); the data index advances only by a round's fresh samples
  (:mod:`psyche.coordinator.lost_work`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from psyche.coordinator import consensus, lost_work
from psyche.coordinator.types import (
    MAX_CLIENTS,
    MAX_WITNESSES,
    NUM_STORED_ROUNDS,
    TICKED,
    Client,
    ClientState,
    CoordinatorError,
    CoordinatorException,
    EpochState,
    P2PIdentityTakenError,
    Progress,
    Round,
    RunState,
    TickResult,
    Witness,
)
from psyche.protocol.commitment import sha256, sha256v
from psyche.protocol.committee import (
    Committee,
    CommitteeProof,
    CommitteeSelection,
    CommitteeSelectionError,
)
from psyche.protocol.config import (
    LLM,
    Checkpoint,
    CoordinatorConfig,
    DummyCheckpoint,
    GcsCheckpoint,
    HubCheckpoint,
    Model,
    P2PCheckpoint,
    P2PGcsCheckpoint,
)
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.shuffle import compute_shuffled_index

E = CoordinatorError


def _fail(code: CoordinatorError, detail: str = "") -> CoordinatorException:
    return CoordinatorException(code, detail)


@dataclass(slots=True)
class Coordinator:
    run_id: str
    config: CoordinatorConfig
    model: Model
    run_state: RunState = RunState.Uninitialized
    progress: Progress = field(default_factory=Progress)
    epoch_state: EpochState = field(default_factory=EpochState)
    run_state_start_unix_timestamp: int = 0
    pending_pause: bool = False

    # --- helpers (SPEC §1.6) --------------------------------------------------------------------

    def clone(self) -> Coordinator:
        return copy.deepcopy(self)

    @property
    def llm(self) -> LLM:
        assert isinstance(self.model, LLM)
        return self.model

    def check_timeout(self, now: int, duration: int) -> bool:
        start = self.run_state_start_unix_timestamp
        return now != start and now >= start + duration

    def check_epoch_timeout(self, now: int) -> bool:
        start = self.epoch_state.start_timestamp
        return now != start and now >= start + self.config.epoch_time

    def current_round(self) -> Round:
        return self.epoch_state.rounds[self.epoch_state.rounds_head]

    def previous_round(self) -> Round | None:
        head = self.epoch_state.rounds_head
        if head == 0 and self.current_round().height == 0:
            return None
        return self.epoch_state.rounds[(head - 1) % NUM_STORED_ROUNDS]

    def previous_previous_round(self) -> Round | None:
        head = self.epoch_state.rounds_head
        if head == 0 and self.current_round().height <= 1:
            return None
        return self.epoch_state.rounds[(head - 2) % NUM_STORED_ROUNDS]

    def batch_size_for_round(self, rnd: Round) -> int:
        return self.config.get_batch_size(rnd.data_index * self.llm.max_seq_len)

    def total_tokens_processed(self) -> int:
        if self.run_state.active:
            return self.current_round().data_index * self.llm.max_seq_len
        return self.progress.epoch_start_data_index * self.llm.max_seq_len

    def last_step_set(self) -> bool:
        return self.epoch_state.last_step != 0

    def is_healthy_member(self, index: int, who: NodeIdentity) -> bool:
        clients = self.epoch_state.clients
        return (
            0 <= index < len(clients)
            and clients[index].id == who
            and clients[index].state is ClientState.Healthy
        )

    def index_of(self, who: NodeIdentity) -> int | None:
        for i, c in enumerate(self.epoch_state.clients):
            if c.id == who:
                return i
        return None

    def claim_p2p_key(
        self, who: NodeIdentity, pending: Iterable[NodeIdentity]
    ) -> list[NodeIdentity]:
        """Check the P2P key of a join of ``who`` against the clients ``pending`` for the next
        epoch and this epoch's clients; returns the pending clients to remove from the pending
        list, or raises :class:`P2PIdentityTakenError`. Changes nothing itself.

        Peers attribute gossip by P2P key, so a key held by two wallets lets one of them get the
        other's results dropped. A key held by a *different* wallet (pending or in the epoch) is
        refused, unless ``who`` proves it is its own: ``p2p_identity == signer``, the key that
        signed the join (the server's challenge, the Solana transaction). Such a join takes the
        key over: the pending rivals are returned for removal (their claim cannot be proven; an
        epoch client keeps its place until the epoch ends), so whoever registered the key first
        cannot lock its owner out. The Solana program applies the same rule
        (``ClientsState::register``); docs/protocol.md, "One P2P key per wallet".
        """
        key = who.p2p_identity

        def rival(other: NodeIdentity) -> bool:
            return other.p2p_identity == key and other.signer != who.signer

        rivals = [p for p in pending if rival(p)]
        if who.signer == key:
            return rivals
        if rivals or any(rival(c.id) for c in self.epoch_state.clients):
            raise P2PIdentityTakenError(
                f"P2PIdentityTaken: P2P key {key.hex()} is held by another wallet of this run "
                "(pending for the next epoch or in the current one)"
            )
        return []

    def witness_count(self) -> int:
        return self.config.witness_count(len(self.epoch_state.clients))

    def committee_selection(self, rnd: Round) -> CommitteeSelection:
        try:
            return CommitteeSelection(
                tie_breaker_nodes=rnd.tie_breaker_tasks,
                witness_nodes=self.config.witness_nodes,
                verification_percent=self.config.verification_percent,
                total_nodes=rnd.clients_len,
                seed=rnd.random_seed,
            )
        except CommitteeSelectionError as e:
            raise _fail(E.InvalidCommitteeSelection, str(e)) from None

    def previous_round_clients(self) -> list[NodeIdentity]:
        """The epoch client list as it was during the previous round, rebuilt exactly."""
        prev = self.previous_round()
        if prev is None:
            return [c.id for c in self.epoch_state.clients]
        return self.round_clients(prev)

    def round_clients(self, rnd: Round) -> list[NodeIdentity]:
        """The epoch client list as it was during ``rnd`` (a stored round of this epoch).

        Clients only ever leave during an epoch, so the ``k = rnd.clients_len - len(clients)``
        newest entries of ``exited_clients`` are exactly those removed since ``rnd`` started.
        Undo their removals newest boundary first; within one boundary, re-insert in ascending
        ``exited_index`` (each index is relative to the list before that removal).
        """
        ids = [c.id for c in self.epoch_state.clients]
        k = min(rnd.clients_len - len(ids), len(self.epoch_state.exited_clients))
        if k <= 0:
            return ids[: rnd.clients_len]
        recent = self.epoch_state.exited_clients[-k:]
        for height in sorted({c.exited_height for c in recent}, reverse=True):
            batch = sorted(
                (c for c in recent if c.exited_height == height), key=lambda c: c.exited_index
            )
            for c in batch:
                ids.insert(c.exited_index, c.id)
        return ids

    def checkpointer_indices(self) -> list[int]:
        """Clients elected to checkpoint this Cooldown: max(1, ⌊n/3⌋) of them, chosen by a
        swap-or-not shuffle of the current round's seed salted with ``checkpointer``."""
        n = len(self.epoch_state.clients)
        if n == 0:
            return []
        want = max(1, n // 3)
        seed = sha256v(
            sha256(self.current_round().random_seed.to_bytes(8, "little")), b"checkpointer"
        )
        return [i for i in range(n) if compute_shuffled_index(i, n, seed) < want]

    # --- internal transitions -------------------------------------------------------------------

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

    # --- tick (SPEC §1.7) -----------------------------------------------------------------------

    def tick(self, pending: Sequence[NodeIdentity] | None, now: int, seed: int) -> TickResult:
        state = self.run_state
        if state.halted:
            raise _fail(E.Halted, f"run is {state.name}")
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

    # --- message handlers (SPEC §1.8) -----------------------------------------------------------

    def _check_not_halted(self) -> None:
        if self.run_state.halted:
            raise _fail(E.Halted, f"run is {self.run_state.name}")

    def _check_duplicate(self, who: NodeIdentity) -> None:
        clients = self.epoch_state.clients
        for w in self.current_round().witnesses:
            i = w.proof.index
            if i < len(clients) and clients[i].id == who:
                raise _fail(E.DuplicateWitness, "this client already sent a witness this round")
        if len(self.current_round().witnesses) >= MAX_WITNESSES:
            raise _fail(E.WitnessesFull)

    def warmup_witness(self, sender: NodeIdentity, witness: Witness, now: int, seed: int) -> None:
        """A client has loaded the model; enough of these start training before warmup_time."""
        self._check_not_halted()
        if self.run_state is RunState.RoundTrain:
            return
        if self.run_state is not RunState.Warmup:
            raise _fail(E.InvalidRunState, f"warmup witness in {self.run_state.name}")
        if not self.is_healthy_member(witness.proof.index, sender):
            raise _fail(E.InvalidWitness, "sender is not the healthy epoch client at that index")
        self._check_duplicate(sender)
        self.current_round().witnesses.append(witness)
        if len(self.current_round().witnesses) >= self.witness_count():
            self._start_round_train(now, seed)

    def witness(self, sender: NodeIdentity, witness: Witness, now: int) -> None:
        """An elected witness attests what it received; a full set ends RoundTrain early."""
        self._check_not_halted()
        if self.run_state not in (RunState.RoundTrain, RunState.RoundWitness):
            raise _fail(E.InvalidRunState, f"witness in {self.run_state.name}")
        proof = witness.proof
        sel = self.committee_selection(self.current_round())
        clients = [c.id for c in self.epoch_state.clients]
        if not (
            self.is_healthy_member(proof.index, sender)
            and sel.verify_witness(proof, sender, clients)
            and proof.witness
        ):
            raise _fail(E.InvalidWitness, "proof does not match an elected witness of this round")
        self._check_duplicate(sender)
        self.current_round().witnesses.append(witness)
        if (
            len(self.current_round().witnesses) >= self.witness_count()
            and self.run_state is RunState.RoundTrain
        ):
            self._change_state(now, RunState.RoundWitness)

    def trainer_healthy(self, who: NodeIdentity) -> bool:
        prev = self.previous_round()
        if prev is None:
            return False
        return consensus.trainer_healthy(who, prev.witnesses, self.config)

    def trainer_ejectable(self, who: NodeIdentity) -> bool:
        """A quorum of the previous round's witnesses agree ``who`` delivered nothing."""
        prev = self.previous_round()
        if prev is None:
            return False
        return consensus.trainer_ejectable(who, prev.witnesses, self.config)

    def health_check(
        self, sender: NodeIdentity, checks: Iterable[tuple[NodeIdentity, CommitteeProof]]
    ) -> int:
        """Eject clients that a quorum of the previous round's witnesses agree delivered nothing;
        returns how many. A reporter cannot name itself. Each ejected client's interval of the
        round the check is about is queued as lost."""
        self._check_not_halted()
        if self.run_state not in (RunState.RoundTrain, RunState.RoundWitness, RunState.Cooldown):
            raise _fail(E.NoActiveRound, f"no round in {self.run_state.name}")
        if self.current_round().height < 2:
            raise _fail(E.InvalidHealthCheck, "health checks start at round height 2")
        if self.index_of(sender) is None:
            raise _fail(E.InvalidHealthCheck, "reporter is not an epoch client")
        checks = list(checks)
        if not checks:
            raise _fail(E.InvalidHealthCheck, "empty health check")
        prev = self.previous_round()
        assert prev is not None
        sel = self.committee_selection(prev)
        prev_clients = self.previous_round_clients()
        for who, proof in checks:
            expect = sel.get_committee(proof.index) if 0 <= proof.index < prev.clients_len else None
            if (
                expect is None
                or proof.index >= len(prev_clients)
                or prev_clients[proof.index] != who
                or expect != proof
            ):
                raise _fail(E.InvalidCommitteeProof, f"bad committee proof for client {who}")
            if proof.committee is not Committee.Trainer:
                raise _fail(E.InvalidCommitteeProof, "only trainers can be health-checked")
            if who == sender:
                raise _fail(E.InvalidHealthCheck, "a reporter cannot report itself")
            if not self.trainer_ejectable(who):
                raise _fail(
                    E.InvalidHealthCheck,
                    f"client {who} is not agreed missing by a quorum of witnesses",
                )
        checked = self.previous_previous_round()
        intervals = lost_work.intervals_of(self, checked) if checked is not None else {}
        dropped = 0
        for who, _ in checks:
            i = self.index_of(who)
            if i is not None and self.epoch_state.clients[i].state is ClientState.Healthy:
                self.epoch_state.clients[i].state = ClientState.Ejected
                dropped += 1
                lost_work.push_lost(self.epoch_state, intervals.get(who))
        return dropped

    def checkpoint(self, sender: NodeIdentity, index: int, ck: Checkpoint, now: int) -> TickResult:
        """An elected checkpointer stored the model; the first accepted one ends Cooldown."""
        self._check_not_halted()
        if self.run_state is not RunState.Cooldown:
            raise _fail(E.InvalidRunState, f"checkpoint in {self.run_state.name}")
        if not self.is_healthy_member(index, sender):
            raise _fail(E.InvalidCommitteeProof, "sender is not the healthy client at that index")
        if index not in self.checkpointer_indices():
            raise _fail(E.InvalidCheckpoint, "sender is not an elected checkpointer")
        new = _checkpoint_transition(self.llm.checkpoint, ck)
        if new is None:
            raise _fail(
                E.InvalidCheckpoint,
                f"cannot record a {type(ck).TAG} checkpoint on a {self.llm.checkpoint.TAG} run",
            )
        self._set_checkpoint(new)
        return self._end_cooldown(now)

    def withdraw(self, index: int) -> None:
        clients = self.epoch_state.clients
        if not (0 <= index < len(clients)) or clients[index].state is not ClientState.Healthy:
            raise _fail(E.InvalidWithdraw, f"no healthy client at index {index}")
        clients[index].state = ClientState.Withdrawn

    def pause(self, now: int) -> None:
        self._check_not_halted()
        if self.run_state.active:
            self.pending_pause = True
            return
        self._withdraw_all()
        self._change_state(now, RunState.Paused)
        self.epoch_state.cold_start_epoch = True

    def resume(self, now: int) -> None:
        """Leave Paused (or Uninitialized, resetting the step to 1) for WaitingForMembers."""
        if self.run_state is RunState.Uninitialized:
            self.progress.step = 1
            self.epoch_state.lost = []
        elif self.run_state is not RunState.Paused:
            raise _fail(E.CannotResume, f"cannot resume from {self.run_state.name}")
        self._start_waiting_for_members(now)


def _checkpoint_transition(current: Checkpoint, new: Checkpoint) -> Checkpoint | None:
    """The reference's (current, reported) → stored table; None means not accepted."""
    if isinstance(new, HubCheckpoint):
        if isinstance(current, P2PCheckpoint | P2PGcsCheckpoint):
            return P2PCheckpoint(new.repo)
        if isinstance(current, HubCheckpoint):
            return HubCheckpoint(new.repo)
    if isinstance(new, GcsCheckpoint):
        if isinstance(current, P2PGcsCheckpoint | P2PCheckpoint):
            return P2PGcsCheckpoint(new.repo)
        if isinstance(current, GcsCheckpoint):
            return GcsCheckpoint(new.repo)
    return None
