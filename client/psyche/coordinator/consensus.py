"""Quorum, trainer health and consensus selection from witness blooms.

See docs/protocol.md, "Quorum", "Consensus" and "Health and health checks".

Run by the coordinator (health checks) and by every client at apply time (which results count),
so it takes plain values and has no state of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from psyche.coordinator.types import Witness
from psyche.protocol.commitment import sha256
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.identity import NodeIdentity


def participant_item(who: NodeIdentity) -> bytes:
    """What a witness puts in its participant bloom for a trainer it received from."""
    return sha256(who.signer)


def trainer_healthy_score(who: NodeIdentity, witnesses: Sequence[Witness]) -> int:
    item = participant_item(who)
    return sum(1 for w in witnesses if w.participant_bloom.contains(item))


def trainer_healthy(
    who: NodeIdentity, witnesses: Sequence[Witness], config: CoordinatorConfig
) -> bool:
    """Healthy iff at least a quorum of the round's witnesses saw this trainer's result."""
    return trainer_healthy_score(who, witnesses) >= config.quorum(len(witnesses))


def trainer_missing_score(who: NodeIdentity, witnesses: Sequence[Witness]) -> int:
    """How many of the round's witnesses positively attest that this trainer did not deliver."""
    return len(witnesses) - trainer_healthy_score(who, witnesses)


def trainer_ejectable(
    who: NodeIdentity, witnesses: Sequence[Witness], config: CoordinatorConfig
) -> bool:
    """A health check may eject this trainer: it is not healthy *and* at least a quorum of the
    round's witnesses agree it is missing.

    Not being healthy alone is not enough: with fewer witnesses than `witness_nodes` (one was
    offline) or one witness that sends empty blooms, every trainer falls below the quorum of
    sightings, and ejecting on that would let one party (or one absence) empty the run. A
    missing vote counts only a witness that reported, so no witness can be outvoted by silence.
    """
    if trainer_healthy(who, witnesses, config):
        return False
    return trainer_missing_score(who, witnesses) >= config.quorum(len(witnesses))


def select_consensus_commitment(
    data_hashes: Sequence[bytes], witnesses: Sequence[Witness], config: CoordinatorConfig
) -> int | None:
    """Index of the commitment (in arrival order) that a quorum of witnesses voted for.

    Each witness votes for the first commitment whose hash is in its broadcast bloom; the
    candidate with most votes at or above quorum wins, the later one on a tie; None: no consensus.
    """
    quorum = config.quorum(len(witnesses))
    scores = [0] * len(data_hashes)
    for w in witnesses:
        for i, h in enumerate(data_hashes):
            if w.broadcast_bloom.contains(h):
                scores[i] += 1
                break
    best: int | None = None
    for i, s in enumerate(scores):
        if s >= quorum and (best is None or s >= scores[best]):
            best = i
    return best
