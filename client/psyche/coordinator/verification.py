"""Result verification on the coordinator: which results a round samples, who judges them, and
what a quorum of verdicts does (docs/protocol.md, "Threat model and result verification").

The results of round ``r`` are sampled with the seed of round ``r + 1`` (unknown while ``r``
trained) and judged by the first verifier witnesses of round ``r + 1``, whose verdicts ride in
their witnesses. The same pure functions serve the coordinator (ejections at the RoundWitness end)
and every client (which results to leave out of the apply of round ``r`` at the start of
``r + 2``), so both read the verdicts from the same stored witnesses and decide alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from psyche.coordinator.types import Verdict, Witness
from psyche.protocol.commitment import sha256, sha256v
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.shuffle import compute_shuffled_index

VERIFY_SALT = b"verify"
MAX_SAMPLED_RESULTS = 16
"""At most this many results are sampled per round: a verdict is two u16 bitmasks."""
VERIFIERS_PER_ROUND = 3
"""The elected witnesses at positions below this verify; a majority of them decides."""


def sampled_count(n_trainers: int, verification_percent: int) -> int:
    """How many of a round's ``n_trainers`` results are sampled: ⌈n·vp/100⌉, at most 16."""
    if n_trainers <= 0 or verification_percent <= 0:
        return 0
    return min(MAX_SAMPLED_RESULTS, math.ceil(n_trainers * verification_percent / 100))


def verify_seed(next_round_seed: int) -> bytes:
    return sha256v(sha256(next_round_seed.to_bytes(8, "little")), VERIFY_SALT)


def sampled_trainers(n_trainers: int, next_round_seed: int, verification_percent: int) -> list[int]:
    """Indices (in the judged round's client list) sampled for verification, by slot: slot ``p``
    is the index the swap-or-not shuffle puts at position ``p``, so only the sampled slots cost
    hashes (this runs in a Solana instruction)."""
    seed = verify_seed(next_round_seed)
    return [
        compute_shuffled_index(p, n_trainers, seed)
        for p in range(sampled_count(n_trainers, verification_percent))
    ]


def verifier_count(witness_count: int) -> int:
    """Verifiers of a round with ``witness_count`` elected witnesses."""
    return min(VERIFIERS_PER_ROUND, witness_count)


def verdict_quorum(n_verifiers: int) -> int:
    """A majority of the verifiers: 1 of 1, 2 of 2, 2 of 3."""
    return n_verifiers // 2 + 1


def is_verifier(w: Witness) -> bool:
    return w.proof.witness and w.proof.position < VERIFIERS_PER_ROUND


def verdict_error(
    verdict: Verdict, verifier: bool, n_sampled: int, own_slots: Sequence[int]
) -> str | None:
    """Why a witness may not carry ``verdict`` (None when it may). ``own_slots`` are the slots
    that sample the witness's own result: nobody judges itself."""
    if verdict.empty:
        return None
    if not verifier:
        return "only a verifier witness carries a verdict"
    if verdict.mismatch & ~verdict.checked:
        return "a mismatch bit without its checked bit"
    if verdict.checked >> n_sampled:
        return f"verdict names a slot beyond the {n_sampled} sampled results"
    for p in own_slots:
        if verdict.checked >> p & 1:
            return "a verifier cannot judge its own result"
    return None


@dataclass(frozen=True, slots=True)
class VerdictOutcome:
    rejected: list[NodeIdentity]
    """Trainers whose judged result a quorum of verifiers found a mismatch (left out of the
    apply, ejected and slashed)."""
    false_accusers: list[NodeIdentity]
    """Verifiers that voted mismatch on a result a quorum of verifiers found a match."""


def judge(
    witnesses: Sequence[Witness],
    witness_ids: Sequence[NodeIdentity],
    judged_clients: Sequence[NodeIdentity],
    sampled: Sequence[int],
    n_verifiers: int,
) -> VerdictOutcome:
    """Count the verdicts of the stored ``witnesses`` (sent by ``witness_ids``, in order) on the
    ``sampled`` indices of ``judged_clients`` (the judged round's client list), in slot order."""
    q = verdict_quorum(n_verifiers)
    rejected: list[NodeIdentity] = []
    accusers: list[NodeIdentity] = []
    verifiers = [
        (w.verdict, who) for w, who in zip(witnesses, witness_ids, strict=True) if is_verifier(w)
    ]
    for slot, index in enumerate(sampled):
        if index >= len(judged_clients):
            continue
        bit = 1 << slot
        against = [who for v, who in verifiers if v.checked & v.mismatch & bit]
        matches = sum(1 for v, _ in verifiers if v.checked & ~v.mismatch & bit)
        if len(against) >= q:
            rejected.append(judged_clients[index])
        elif matches >= q:
            accusers.extend(who for who in against if who not in accusers)
    return VerdictOutcome(rejected, accusers)
