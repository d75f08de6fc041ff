"""Committee and witness selection for one round.

See docs/protocol.md, "Committee and witness selection".

Every client computes the same roles from public inputs only (the round's ``random_seed`` and
client count), so nobody has to announce roles and anyone can check a claimed role from a small
proof ``(position, index)``. Positions come from the swap-or-not shuffle, which maps one index at a
time; a verifier therefore costs ~180 hashes per proof rather than a full permutation.

Two independent shuffles (salted ``b"committee"`` and ``b"witness"``) decide the two roles, so
being a witness says nothing about being a trainer. Witnesses are the first ``witness_nodes``
positions, or the first ``MAX_WITNESSES`` (32) when ``witness_nodes == 0``; hence the number of
witnesses is ``min(total_nodes, witness_nodes or 32)``.

Verification differs from the reference in one deliberate way: malformed or out-of-range proofs
return ``False`` instead of panicking (on chain a panic aborts the transaction; here it would crash
a server on peer input). The seed is grindable on Solana (docs/protocol.md,
"Known flaws of the reference", flaw 8); that is a property of how ``random_seed`` is drawn, not of
this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeGuard

from psyche.protocol.commitment import sha256, sha256v
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.shuffle import compute_shuffled_index, shuffled_positions

__all__ = [
    "COMMITTEE_SALT",
    "MAX_WITNESSES",
    "WITNESS_SALT",
    "Committee",
    "CommitteeProof",
    "CommitteeSelection",
    "CommitteeSelectionError",
    "WitnessProof",
]

MAX_WITNESSES = 32
COMMITTEE_SALT = b"committee"
WITNESS_SALT = b"witness"
_U64_MAX = (1 << 64) - 1


class Committee(IntEnum):
    TieBreaker = 0
    Verifier = 1
    Trainer = 2


@dataclass(frozen=True, slots=True)
class CommitteeProof:
    committee: Committee
    """The role at ``position``."""
    position: int
    """Position of ``index`` in the committee shuffle."""
    index: int
    """The client's index in the epoch's client list."""


@dataclass(frozen=True, slots=True)
class WitnessProof:
    position: int
    """Position of ``index`` in the witness shuffle."""
    index: int
    """The client's index in the epoch's client list."""
    witness: bool
    """Whether ``position`` falls in the witness range."""


class CommitteeSelectionError(ValueError):
    """Invalid selection parameters, or an index outside the round's clients."""


def _check_u64(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CommitteeSelectionError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= _U64_MAX:
        raise CommitteeSelectionError(f"{name} must be an unsigned 64-bit integer, got {value}")


def _is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class CommitteeSelection:
    """Roles for one round: built from the config and the round's client count and seed."""

    __slots__ = (
        "_committee_seed",
        "_seed",
        "_tie_breaker_nodes",
        "_total_nodes",
        "_verifier_nodes",
        "_witness_nodes",
        "_witness_seed",
    )

    def __init__(
        self,
        *,
        tie_breaker_nodes: int,
        witness_nodes: int,
        verification_percent: int,
        total_nodes: int,
        seed: int,
    ) -> None:
        for name, value in (
            ("tie_breaker_nodes", tie_breaker_nodes),
            ("witness_nodes", witness_nodes),
            ("verification_percent", verification_percent),
            ("total_nodes", total_nodes),
            ("seed", seed),
        ):
            _check_u64(name, value)
        if total_nodes < tie_breaker_nodes:
            raise CommitteeSelectionError(
                f"total_nodes ({total_nodes}) is less than tie_breaker_nodes ({tie_breaker_nodes})"
            )
        if witness_nodes != 0 and total_nodes < witness_nodes:
            raise CommitteeSelectionError(
                f"total_nodes ({total_nodes}) is less than witness_nodes ({witness_nodes})"
            )
        if verification_percent > 100:
            raise CommitteeSelectionError(
                f"verification_percent must be at most 100, got {verification_percent}"
            )
        self._tie_breaker_nodes = tie_breaker_nodes
        self._witness_nodes = witness_nodes
        self._total_nodes = total_nodes
        self._seed = seed
        self._verifier_nodes = (total_nodes - tie_breaker_nodes) * verification_percent // 100
        seed32 = sha256(seed.to_bytes(8, "little"))
        self._committee_seed = sha256v(seed32, COMMITTEE_SALT)
        self._witness_seed = sha256v(seed32, WITNESS_SALT)

    @property
    def total_nodes(self) -> int:
        return self._total_nodes

    @property
    def witness_nodes(self) -> int:
        """The configured count (0 means "up to ``MAX_WITNESSES``")."""
        return self._witness_nodes

    @property
    def tie_breaker_nodes(self) -> int:
        return self._tie_breaker_nodes

    @property
    def verifier_nodes(self) -> int:
        return self._verifier_nodes

    @property
    def seed(self) -> int:
        return self._seed

    def _position(self, index: int, seed: bytes) -> int:
        if not _is_index(index) or index >= self._total_nodes:
            raise CommitteeSelectionError(
                f"client index {index} is out of range for {self._total_nodes} nodes"
            )
        return compute_shuffled_index(index, self._total_nodes, seed)

    def _committee_at(self, position: int) -> Committee:
        if position < self._tie_breaker_nodes:
            return Committee.TieBreaker
        if position < self._tie_breaker_nodes + self._verifier_nodes:
            return Committee.Verifier
        return Committee.Trainer

    def _is_witness_at(self, position: int) -> bool:
        limit = self._witness_nodes if self._witness_nodes != 0 else MAX_WITNESSES
        return position < limit

    def get_committee(self, index: int) -> CommitteeProof:
        position = self._position(index, self._committee_seed)
        return CommitteeProof(self._committee_at(position), position, index)

    def get_committees(self, count: int) -> list[CommitteeProof]:
        """``[get_committee(i) for i in range(count)]`` with the shuffle's hashes shared between
        indices (:func:`~psyche.protocol.shuffle.shuffled_positions`): every client computes the
        whole round's assignment, so this is O(count) arithmetic instead of O(count) × 180
        hashes."""
        if not _is_index(count) or count > self._total_nodes:
            raise CommitteeSelectionError(
                f"{count} clients are out of range for {self._total_nodes} nodes"
            )
        positions = shuffled_positions(range(count), self._total_nodes, self._committee_seed)
        return [CommitteeProof(self._committee_at(p), p, i) for i, p in enumerate(positions)]

    def get_witness(self, index: int) -> WitnessProof:
        position = self._position(index, self._witness_seed)
        return WitnessProof(position, index, self._is_witness_at(position))

    def verify_committee(
        self, proof: CommitteeProof, client_id: NodeIdentity, clients: Sequence[NodeIdentity]
    ) -> bool:
        """True iff ``proof`` is ``client_id``'s committee proof in ``clients``; never raises."""
        if not isinstance(proof, CommitteeProof) or not self._owns_index(
            proof.index, client_id, clients
        ):
            return False
        expected = self.get_committee(proof.index)
        return expected.position == proof.position and expected.committee == proof.committee

    def verify_witness(
        self, proof: WitnessProof, client_id: NodeIdentity, clients: Sequence[NodeIdentity]
    ) -> bool:
        """True iff ``proof`` is ``client_id``'s witness proof in ``clients``; never raises."""
        if not isinstance(proof, WitnessProof) or not self._owns_index(
            proof.index, client_id, clients
        ):
            return False
        expected = self.get_witness(proof.index)
        return expected.position == proof.position and expected.witness == proof.witness

    def _owns_index(
        self, index: object, client_id: NodeIdentity, clients: Sequence[NodeIdentity]
    ) -> bool:
        if not _is_index(index):
            return False
        # An index beyond total_nodes has no position; the reference would panic here.
        if index >= self._total_nodes or index >= len(clients):
            return False
        return clients[index] == client_id

    def __repr__(self) -> str:
        return (
            f"CommitteeSelection(total_nodes={self._total_nodes}, "
            f"tie_breaker_nodes={self._tie_breaker_nodes}, "
            f"verifier_nodes={self._verifier_nodes}, witness_nodes={self._witness_nodes}, "
            f"seed={self._seed})"
        )
