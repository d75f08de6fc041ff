"""What a client knows about one round, and the pure decisions made from it (SPEC §2.2, §4.3–4.7).

Shared by the real daemon and the in-process simulation so both decide identically: who trains
which batch, which received results a witness attests, and which results are applied by witness
consensus. No I/O here; payload bytes arrive already downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from psyche.coordinator import Coordinator, Round, Witness
from psyche.coordinator.consensus import participant_item, select_consensus_commitment
from psyche.distro import PayloadError, PayloadSpec, decode_payload
from psyche.distro.payload import payload_hash
from psyche.protocol.bloom import Bloom
from psyche.protocol.commitment import sha256v
from psyche.protocol.committee import WitnessProof
from psyche.protocol.data_selection import BatchId, assign_data_for_state
from psyche.protocol.identity import NodeIdentity


@dataclass(frozen=True, slots=True)
class ReceivedResult:
    """A trainer's result for one batch: its commitment hash and, once downloaded, the bytes."""

    trainer: NodeIdentity
    batch: BatchId
    data_hash: bytes
    payload: bytes | None = None


@dataclass
class RoundState:
    """A client's view of one round of the current epoch."""

    height: int
    step: int
    trains: bool
    """False in the drain rounds after ``last_step`` is set."""
    assignment: dict[BatchId, NodeIdentity]
    results: dict[BatchId, ReceivedResult] = field(default_factory=dict)
    finished: set[NodeIdentity] = field(default_factory=set)
    sent_finished: bool = False
    sent_witness: bool = False

    def batch_of(self, trainer: NodeIdentity) -> BatchId | None:
        for batch, who in self.assignment.items():
            if who == trainer:
                return batch
        return None

    def all_received(self) -> bool:
        return all(
            b in self.results and self.results[b].payload is not None for b in self.assignment
        )


def round_state_for(coord: Coordinator) -> RoundState:
    """The round that just started in ``coord`` (RoundTrain), with its data assignment."""
    rnd = coord.current_round()
    trains = not coord.last_step_set()
    assignment: dict[BatchId, NodeIdentity] = {}
    if trains:
        assignment = assignment_for(coord, rnd, [c.id for c in coord.epoch_state.clients])
    return RoundState(rnd.height, coord.progress.step, trains, assignment)


def assignment_for(
    coord: Coordinator, rnd: Round, clients: Sequence[NodeIdentity]
) -> dict[BatchId, NodeIdentity]:
    sel = coord.committee_selection(rnd)
    return assign_data_for_state(
        clients,
        sel,
        rnd.data_index,
        coord.batch_size_for_round(rnd),
        rnd.random_seed,
        rnd.retries,
    )


def verify_result(result: ReceivedResult, step: int, spec: PayloadSpec) -> bool:
    """The downloaded bytes match the signed commitment and decode under the run's layout."""
    if result.payload is None:
        return False
    digest = payload_hash(step, result.batch.start, result.batch.end, result.payload)
    if digest != result.data_hash:
        return False
    try:
        decode_payload(result.payload, spec)
    except PayloadError:
        return False
    return True


def build_witness(proof: WitnessProof, attested: RoundState | None, bloom_seed: int) -> Witness:
    """Blooms over the attested (previous) round's verified results: trainers that delivered,
    and the commitment hash of the first verified result per batch."""
    participants, broadcasts = Bloom.empty(bloom_seed), Bloom.empty(bloom_seed ^ 1)
    if attested is not None:
        for batch, res in attested.results.items():
            if res.payload is None or attested.assignment.get(batch) != res.trainer:
                continue
            participants.add(participant_item(res.trainer))
            broadcasts.add(res.data_hash)
    return Witness(proof, participants, broadcasts)


def bloom_seed_for(identity: NodeIdentity, rnd: Round, entropy: bytes = b"") -> int:
    """A per-witness, per-round seed; ``entropy`` (random bytes) keeps it unpredictable."""
    digest = sha256v(
        b"psyche-bloom", identity.signer, rnd.random_seed.to_bytes(8, "little"), entropy
    )
    return int.from_bytes(digest[:8], "little")


def results_to_apply(
    applied: RoundState, witnesses: Sequence[Witness], coord: Coordinator
) -> list[ReceivedResult]:
    """The results of round ``applied`` that a quorum of ``witnesses`` voted for, in batch order.
    Batches with no result or no consensus are skipped here; the coordinator re-assigns the
    intervals of ejected and leaving trainers in later rounds (``Round.retries``)."""
    out: list[ReceivedResult] = []
    for batch in applied.assignment:
        res = applied.results.get(batch)
        if res is None:
            continue
        if select_consensus_commitment([res.data_hash], witnesses, coord.config) == 0:
            out.append(res)
    return out
