"""The coordinator state machine (docs/protocol.md, "Coordinator state machine"), pure and
deterministic.

Three layers, one module each: the state and its queries (:mod:`psyche.coordinator.queries`), the
phase changes driven by ``tick`` (:mod:`psyche.coordinator.transitions`) and, here, the message
handlers of :class:`Coordinator`, as the program's ``core/handlers.rs``. Time
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

from collections.abc import Iterable

from psyche.coordinator import lost_work, verification
from psyche.coordinator.queries import E
from psyche.coordinator.transitions import CoordinatorTransitions
from psyche.coordinator.types import (
    MAX_WITNESSES,
    ClientState,
    CoordinatorException,
    RunState,
    TickResult,
    Witness,
)
from psyche.protocol.committee import Committee, CommitteeProof
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import (
    Checkpoint,
    GcsCheckpoint,
    HubCheckpoint,
    P2PCheckpoint,
    P2PGcsCheckpoint,
)


class Coordinator(CoordinatorTransitions):
    """The whole coordinator: its state and queries (:mod:`psyche.coordinator.queries`), its
    phase changes (:mod:`psyche.coordinator.transitions`) and, here, the message handlers."""

    __slots__ = ()

    def _check_not_halted(self) -> None:
        if self.run_state.halted:
            raise CoordinatorException(E.Halted, f"run is {self.run_state.name}")

    def _check_duplicate(self, who: NodeIdentity) -> None:
        clients = self.epoch_state.clients
        for w in self.current_round().witnesses:
            i = w.proof.index
            if i < len(clients) and clients[i].id == who:
                raise CoordinatorException(
                    E.DuplicateWitness, "this client already sent a witness this round"
                )
        if len(self.current_round().witnesses) >= MAX_WITNESSES:
            raise CoordinatorException(E.WitnessesFull)

    def warmup_witness(self, sender: NodeIdentity, witness: Witness, now: int, seed: int) -> None:
        """A client has loaded the model; enough of these start training before warmup_time."""
        self._check_not_halted()
        if self.run_state is RunState.RoundTrain:
            return
        if self.run_state is not RunState.Warmup:
            raise CoordinatorException(
                E.InvalidRunState, f"warmup witness in {self.run_state.name}"
            )
        if not self.is_healthy_member(witness.proof.index, sender):
            raise CoordinatorException(
                E.InvalidWitness, "sender is not the healthy epoch client at that index"
            )
        self._check_duplicate(sender)
        self.current_round().witnesses.append(witness)
        if len(self.current_round().witnesses) >= self.witness_count():
            self._start_round_train(now, seed)

    def witness(self, sender: NodeIdentity, witness: Witness, now: int) -> None:
        """An elected witness attests what it received; a full set ends RoundTrain early."""
        self._check_not_halted()
        if self.run_state not in (RunState.RoundTrain, RunState.RoundWitness):
            raise CoordinatorException(E.InvalidRunState, f"witness in {self.run_state.name}")
        proof = witness.proof
        sel = self.committee_selection(self.current_round())
        clients = [c.id for c in self.epoch_state.clients]
        if not (
            self.is_healthy_member(proof.index, sender)
            and sel.verify_witness(proof, sender, clients)
            and proof.witness
        ):
            raise CoordinatorException(
                E.InvalidWitness, "proof does not match an elected witness of this round"
            )
        self._check_verdict(sender, witness)
        self._check_duplicate(sender)
        self.current_round().witnesses.append(witness)
        if (
            len(self.current_round().witnesses) >= self.witness_count()
            and self.run_state is RunState.RoundTrain
        ):
            self._change_state(now, RunState.RoundWitness)

    def _check_verdict(self, sender: NodeIdentity, witness: Witness) -> None:
        """A verdict only from a verifier, on the previous round's sampled results, never on its
        own (docs/protocol.md, "Threat model and result verification")."""
        if witness.verdict.empty:
            return
        prev = self.previous_round()
        sampled = self.judged_sample(self.current_round(), prev) if prev is not None else []
        judged = self.round_clients(prev) if prev is not None else []
        own = [p for p, i in enumerate(sampled) if i < len(judged) and judged[i] == sender]
        why = verification.verdict_error(
            witness.verdict, verification.is_verifier(witness), len(sampled), own
        )
        if why is not None:
            raise CoordinatorException(E.InvalidWitness, why)

    def health_check(
        self, sender: NodeIdentity, checks: Iterable[tuple[NodeIdentity, CommitteeProof]]
    ) -> int:
        """Eject clients that a quorum of the previous round's witnesses agree delivered nothing;
        returns how many. A reporter cannot name itself. Each ejected client's interval of the
        round the check is about is queued as lost."""
        self._check_not_halted()
        if self.run_state not in (RunState.RoundTrain, RunState.RoundWitness, RunState.Cooldown):
            raise CoordinatorException(E.NoActiveRound, f"no round in {self.run_state.name}")
        if self.current_round().height < 2:
            raise CoordinatorException(
                E.InvalidHealthCheck, "health checks start at round height 2"
            )
        if self.index_of(sender) is None:
            raise CoordinatorException(E.InvalidHealthCheck, "reporter is not an epoch client")
        checks = list(checks)
        if not checks:
            raise CoordinatorException(E.InvalidHealthCheck, "empty health check")
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
                raise CoordinatorException(
                    E.InvalidCommitteeProof, f"bad committee proof for client {who}"
                )
            if proof.committee is not Committee.Trainer:
                raise CoordinatorException(
                    E.InvalidCommitteeProof, "only trainers can be health-checked"
                )
            if who == sender:
                raise CoordinatorException(E.InvalidHealthCheck, "a reporter cannot report itself")
            if not self.trainer_ejectable(who):
                raise CoordinatorException(
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
            raise CoordinatorException(E.InvalidRunState, f"checkpoint in {self.run_state.name}")
        if not self.is_healthy_member(index, sender):
            raise CoordinatorException(
                E.InvalidCommitteeProof, "sender is not the healthy client at that index"
            )
        if index not in self.checkpointer_indices():
            raise CoordinatorException(E.InvalidCheckpoint, "sender is not an elected checkpointer")
        new = _checkpoint_transition(self.llm.checkpoint, ck)
        if new is None:
            raise CoordinatorException(
                E.InvalidCheckpoint,
                f"cannot record a {type(ck).TAG} checkpoint on a {self.llm.checkpoint.TAG} run",
            )
        self._set_checkpoint(new)
        return self._end_cooldown(now)

    def withdraw(self, index: int) -> None:
        clients = self.epoch_state.clients
        if not (0 <= index < len(clients)) or clients[index].state is not ClientState.Healthy:
            raise CoordinatorException(E.InvalidWithdraw, f"no healthy client at index {index}")
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
            raise CoordinatorException(E.CannotResume, f"cannot resume from {self.run_state.name}")
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
