"""State types of the coordinator (docs/protocol.md, "Coordinator state"), mutable and slotted.

They mirror the on-chain layout of the Rust program field for field, with our deviations:

* ``Witness`` has no ``broadcast_merkle`` and uses 3072-bit seed-keyed blooms
  (:class:`psyche.protocol.bloom.Bloom`); ``WitnessMetadata`` is compact (no prompt tokens, evals as
  (task index, value)) so that a witness fits one Solana transaction.
* ``Client`` also records ``exited_index``, its index in ``clients`` when it left, so the list of
  any past round can be rebuilt exactly (the reference guessed, wrongly when clients left from
  the middle of the list).
* ``Round.retries`` and ``EpochState.lost`` implement "no lost work" (docs/protocol.md): intervals
  whose results cannot reach consensus wait in ``lost`` (FIFO, at most ``MAX_LOST_BATCHES``) and
  are re-assigned, at most ``MAX_ROUND_RETRIES`` per round, in later training rounds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity

NUM_STORED_ROUNDS = 4
MAX_CLIENTS = 256
MAX_WITNESSES = 32
MAX_EVALS = 8
MAX_ROUND_RETRIES = 8
"""At most this many lost intervals are re-assigned in one round."""
MAX_LOST_BATCHES = 64
"""Capacity of ``EpochState.lost``; an interval lost while it is full is dropped."""


class RunState(enum.Enum):
    Uninitialized = 0
    WaitingForMembers = 1
    Warmup = 2
    RoundTrain = 3
    RoundWitness = 4
    Cooldown = 5
    Finished = 6
    Paused = 7

    @property
    def halted(self) -> bool:
        return self in (RunState.Uninitialized, RunState.Finished, RunState.Paused)

    @property
    def active(self) -> bool:
        return self in (RunState.RoundTrain, RunState.RoundWitness, RunState.Cooldown)


class ClientState(enum.Enum):
    Healthy = 0
    Dropped = 1
    Withdrawn = 2
    Ejected = 3


class CoordinatorErrorCode(enum.Enum):
    """Error codes, in the Rust program's order (Anchor codes are offsets from a base). The
    program and the IDL name this enum ``CoordinatorError``; here that name would read as the
    exception, which is :class:`CoordinatorException`."""

    NoActiveRound = 0
    InvalidWitness = 1
    InvalidRunState = 2
    DuplicateWitness = 3
    InvalidHealthCheck = 4
    Halted = 5
    InvalidCheckpoint = 6
    WitnessesFull = 7
    CannotResume = 8
    InvalidWithdraw = 9
    InvalidCommitteeSelection = 10
    InvalidCommitteeProof = 11


class CoordinatorException(Exception):
    """A message or tick was rejected; ``code`` says why and the state is unchanged."""

    def __init__(self, code: CoordinatorErrorCode, detail: str = "") -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code.name}: {detail}" if detail else code.name)


class P2PIdentityTakenError(Exception):
    """A join named a P2P key that another wallet of the run holds; the Solana program's
    ``P2PIdentityTaken`` (a program error, not a core ``CoordinatorErrorCode``: those keep the
    first twelve Anchor codes). Rule: :meth:`psyche.coordinator.Coordinator.claim_p2p_key`."""


@dataclass(frozen=True, slots=True)
class TickResult:
    """``Ticked`` (epoch_end is None) or an epoch end with its success flag."""

    epoch_end: bool | None = None

    @property
    def ticked(self) -> bool:
        return self.epoch_end is None


TICKED = TickResult()


@dataclass(slots=True)
class Client:
    id: NodeIdentity
    state: ClientState = ClientState.Healthy
    exited_height: int = 0
    exited_index: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    """A verifier's judgement of the previous round's sampled results, one bit per slot
    (docs/protocol.md, "Threat model and result verification"); empty for every other witness."""

    checked: int = 0
    """u16: slots whose result this verifier recomputed."""
    mismatch: int = 0
    """u16, a subset of ``checked``: slots whose result failed the similarity test."""

    @property
    def empty(self) -> bool:
        return self.checked == 0 and self.mismatch == 0


@dataclass(slots=True)
class Witness:
    proof: WitnessProof
    participant_bloom: Bloom
    broadcast_bloom: Bloom
    verdict: Verdict = field(default_factory=Verdict)


@dataclass(frozen=True, slots=True)
class EvalResult:
    task: int
    """Index of the eval task in the run's task list (u8)."""
    value: float


@dataclass(frozen=True, slots=True)
class WitnessMetadata:
    """Statistics a witness reports with its proof; never stored in the coordinator."""

    step: int = 0
    tokens_per_sec: float = 0.0
    bandwidth_per_sec: float = 0.0
    loss: float = 0.0
    efficiency: float = 0.0
    evals: tuple[EvalResult, ...] = ()


@dataclass(slots=True)
class Round:
    witnesses: list[Witness] = field(default_factory=list)
    data_index: int = 0
    random_seed: int = 0
    height: int = 0
    clients_len: int = 0
    tie_breaker_tasks: int = 0
    retries: list[BatchId] = field(default_factory=list)
    """Lost intervals re-assigned in this round, to its first shuffled trainers (in order)."""


@dataclass(slots=True)
class Progress:
    epoch: int = 0
    step: int = 1
    epoch_start_data_index: int = 0


@dataclass(slots=True)
class EpochState:
    rounds: list[Round] = field(default_factory=lambda: [Round() for _ in range(4)])
    clients: list[Client] = field(default_factory=list)
    exited_clients: list[Client] = field(default_factory=list)
    rounds_head: int = 0
    start_step: int = 0
    last_step: int = 0
    start_timestamp: int = 0
    first_round: bool = True
    cold_start_epoch: bool = False
    lost: list[BatchId] = field(default_factory=list)
    """Intervals waiting for re-assignment, oldest first; kept across epochs."""
