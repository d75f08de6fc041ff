"""The coordinator's state and what can be read from it without changing it.

:class:`CoordinatorState` holds the fields (the order and shapes of the program's account and of
the shared test vectors) and the read-only queries every other part builds on: clients, rounds,
committees, consensus on the previous round and checkpointer election. The Rust program keeps the
same queries in ``core/queries.rs``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Self

from psyche.coordinator import consensus, verification
from psyche.coordinator.types import (
    NUM_STORED_ROUNDS,
    ClientState,
    CoordinatorErrorCode,
    CoordinatorException,
    EpochState,
    P2PIdentityTakenError,
    Progress,
    Round,
    RunState,
)
from psyche.protocol.commitment import sha256, sha256v
from psyche.protocol.committee import CommitteeSelection, CommitteeSelectionError
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.model import LLM, Model
from psyche.protocol.shuffle import shuffled_positions

E = CoordinatorErrorCode


@dataclass(slots=True)
class CoordinatorState:
    run_id: str
    config: CoordinatorConfig
    model: Model
    run_state: RunState = RunState.Uninitialized
    progress: Progress = field(default_factory=Progress)
    epoch_state: EpochState = field(default_factory=EpochState)
    run_state_start_unix_timestamp: int = 0
    pending_pause: bool = False

    def clone(self) -> Self:
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

    def round_back(self, n: int) -> Round | None:
        """The stored round ``n`` rounds before the current one (0 ≤ n < 4), if this epoch has
        had it; ``round_back(1)`` is ``previous_round()`` except in a new epoch's first round."""
        if not 0 <= n < NUM_STORED_ROUNDS or self.current_round().height < n:
            return None
        return self.epoch_state.rounds[(self.epoch_state.rounds_head - n) % NUM_STORED_ROUNDS]

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
                # verification_percent samples results to verify (judged_sample); every
                # client still trains, so the committee has no Verifier share.
                verification_percent=0,
                total_nodes=rnd.clients_len,
                seed=rnd.random_seed,
            )
        except CommitteeSelectionError as e:
            raise CoordinatorException(E.InvalidCommitteeSelection, str(e)) from None

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
        return [i for i, p in enumerate(shuffled_positions(range(n), n, seed)) if p < want]

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

    def round_trained(self, rnd: Round) -> bool:
        """Whether ``rnd`` (a stored round of this epoch) was a training round, not a drain
        round. The round at height ``r`` has step ``start_step + r``."""
        es = self.epoch_state
        step = es.start_step + rnd.height
        return not (es.last_step != 0 and step + 2 >= es.last_step)

    def judged_sample(self, judging: Round, judged: Round) -> list[int]:
        """Indices (in ``judged``'s client list) of the results of ``judged`` sampled for
        verification by ``judging``, the round after it, in slot order; none when ``judged`` did
        not train. docs/protocol.md, "Threat model and result verification"."""
        if not self.round_trained(judged):
            return []
        return verification.sampled_trainers(
            judged.clients_len, judging.random_seed, self.config.verification_percent
        )

    def verdict_outcome(self, judging: Round, judged: Round) -> verification.VerdictOutcome:
        """What the verdicts stored in ``judging`` decide about ``judged``'s sampled results (two
        consecutive stored rounds of this epoch). The coordinator acts on it when ``judging``
        ends; clients leave its rejected results out of the apply of ``judged``."""
        sampled = self.judged_sample(judging, judged)
        if not sampled:
            return verification.VerdictOutcome([], [])
        judging_ids = self.round_clients(judging)
        ids = [judging_ids[w.proof.index] for w in judging.witnesses]
        n_verifiers = verification.verifier_count(self.config.witness_count(judging.clients_len))
        return verification.judge(
            judging.witnesses, ids, self.round_clients(judged), sampled, n_verifiers
        )
