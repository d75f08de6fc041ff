"""What a client knows about one round, and the pure decisions made from it.

See docs/protocol.md, "What a witness attests" and "Client behaviour".

Shared by the real daemon and the in-process simulation so both decide identically: who trains
which batch, which received results a witness attests, and which results are applied by witness
consensus. No I/O here; payload bytes arrive already downloaded.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from psyche.coordinator import Coordinator, Round, Witness
from psyche.coordinator.consensus import (
    participant_item,
    select_consensus_commitment,
    trainer_healthy,
)
from psyche.daemon.judgement import Judgement
from psyche.distro import Payload, PayloadError
from psyche.distro.copy_index import CopyIndex, CopySketch, distro_sketch, sketch
from psyche.distro.payload import payload_hash
from psyche.distro.result_format import DistroFormat, ResultFormat, distro_fingerprint
from psyche.protocol.bloom import Bloom
from psyche.protocol.commitment import sha256v
from psyche.protocol.committee import WitnessProof
from psyche.protocol.data_selection import BatchId, assign_data_for_state
from psyche.protocol.identity import NodeIdentity
from psyche.training.schedule import lr_for_step, prev_lr_for_step

DECODED_BUDGET = 32 << 20
"""Bytes of decoded results a round keeps for its apply (:meth:`RoundState.hold`). A result is
decoded when it arrives (to verify it and sketch it for the copy check) and was decoded again at
its apply two rounds later, the largest per-result cost of a round at 64 clients after the copy
check (issue 38; bench/README.md "Scale"). Keeping the decoded form costs memory: about 12 bytes
per coefficient (int64 index, float32 value) against about 1.5 on the wire: 29 kB per result on
the tiny preset. Within the budget the apply reuses it; past it, results are decoded again as
before, so a large model's round holds at most this much more."""

APPLY_LAG = 2
"""Results of round h are applied at the start of round h + 2, by the consensus of round h + 1's
witnesses (docs/protocol.md, "Epoch and round pipeline"); the two drain rounds at the end of an
epoch apply the last two trained rounds."""


@dataclass(frozen=True, slots=True)
class ReceivedResult:
    """A trainer's result for one batch: its commitment hash and, once downloaded, the bytes."""

    trainer: NodeIdentity
    batch: BatchId
    data_hash: bytes
    payload: bytes | None = None
    fingerprint: bytes | None = None
    """The format's fingerprint of the decoded payload, once downloaded and verified."""


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A held result's near-duplicate of ``original`` (held in the round of ``step``), found
    when no reference result of its round was held yet (``RoundState.unsettled``)."""

    original: ReceivedResult
    step: int
    fmt: ResultFormat


@dataclass
class RoundState:
    """A client's view of one round of the current epoch."""

    height: int
    step: int
    trains: bool
    """False in the drain rounds after ``last_step`` is set."""
    assignment: dict[BatchId, NodeIdentity]
    lrs: RoundLRs
    """The round's learning rates, derived once from the coordinator when the round starts."""
    results: dict[BatchId, ReceivedResult] = field(default_factory=dict)
    finished: set[NodeIdentity] = field(default_factory=set)
    sent_finished: bool = False
    sent_witness: bool = False
    closed: bool = False
    """This client has seen the round's RoundWitness phase (stragglers noted once)."""
    judgement: Judgement | None = None
    """As a verifier of this round: the previous round's sampled results and the gradients
    recomputed for them, until the witness carries the verdict (``psyche.daemon.verifying``)."""
    copies: CopyIndex[ReceivedResult] = field(default_factory=CopyIndex, compare=False, repr=False)
    """The sketches of the verified results held (:meth:`hold`), for the copy check."""
    decoded: dict[BatchId, tuple[ReceivedResult, Any]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Held results' decoded payloads, for the apply (within ``DECODED_BUDGET``)."""
    decoded_bytes: int = 0
    """What ``decoded`` has taken of the budget (not given back when the apply takes one)."""
    unsettled: dict[BatchId, Unsettled] = field(default_factory=dict, compare=False, repr=False)
    """Held results that nearly duplicate a held result but were checked before a reference
    result of their round was held (``psyche.daemon.copy_check``): settled when this client
    witnesses the round (``settle_copies``)."""
    chain_ends: dict[NodeIdentity, tuple[bytes, bytes]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Per trainer, the error-buffer and moments hashes its SparseLoCo result of this round
    commits to after it, from every result that arrived and decoded, held or refused: what its
    next round's result must carry on from (``psyche.daemon.chain_check``)."""
    refused: set[BatchId] = field(default_factory=set, compare=False, repr=False)
    """Held results :func:`settle_copies` found to be copies: kept, since a quorum may still
    apply them, but left out of this client's witness."""
    turned_away: set[BatchId] = field(default_factory=set, compare=False, repr=False)
    """Batches whose trainer's signed result arrived here and was refused for what it holds
    (a payload that is not its commitment or does not decode, a broken chain, a copy): never
    held here, and nothing more will come for them, so nothing waits for them
    (:meth:`all_received`)."""
    _batches: dict[NodeIdentity, BatchId] = field(
        init=False, default_factory=dict, compare=False, repr=False
    )
    """``assignment`` inverted once: a verifier looks up every sampled trainer, and a scan per
    lookup made a round's judging O(sampled × clients) (issue 38)."""

    def __post_init__(self) -> None:
        for batch, who in self.assignment.items():
            self._batches.setdefault(who, batch)  # a trainer's first batch, in assignment order

    def hold(self, result: ReceivedResult, sk: CopySketch, decoded: Any = None) -> None:
        """Keep a verified ``result`` (its fingerprint set) whose copy-check sketch is ``sk``
        (:func:`result_sketch`): later results of this round and the next are checked against
        it (``psyche.daemon.copy_check.copied_from``). ``decoded``, its payload as the run's
        format decoded it, is kept for the apply if the round's ``DECODED_BUDGET`` allows."""
        self.results[result.batch] = result
        self.copies.add(result, sk)
        size = decoded_nbytes(decoded)
        if size is not None and self.decoded_bytes + size <= DECODED_BUDGET:
            self.decoded[result.batch] = (result, decoded)
            self.decoded_bytes += size

    def kept_decoded(self, result: ReceivedResult) -> Any | None:
        """``result``'s decoded payload if :meth:`hold` kept it (the same result object)."""
        kept = self.decoded.get(result.batch)
        return kept[1] if kept is not None and kept[0] is result else None

    def take_decoded(self, result: ReceivedResult, fmt: ResultFormat) -> Any:
        """``result``'s decoded payload for its apply, the last use (so no longer kept): the one
        kept when it was held, else its bytes decoded again (the same tensors, bit for bit)."""
        kept = self.kept_decoded(result)
        if kept is not None:
            del self.decoded[result.batch]
            return kept
        assert result.payload is not None
        return fmt.decode(result.payload)

    def batch_of(self, trainer: NodeIdentity) -> BatchId | None:
        """``trainer``'s batch this round (its first, were it assigned several)."""
        return self._batches.get(trainer)

    def all_received(
        self, ignore: Collection[NodeIdentity] = (), staying: Collection[NodeIdentity] | None = None
    ) -> bool:
        """Every assigned batch has its downloaded result or was turned away, except the
        batches of ``ignore`` and, when ``staying`` is given, those of trainers not in it that
        announced none here."""
        for b, who in self.assignment.items():
            if who in ignore or b in self.turned_away:
                continue
            res = self.results.get(b)
            if res is None and staying is not None and who not in staying:
                continue  # it left the epoch with nothing on the way: nothing will come
            if res is None or res.payload is None:
                return False
        return True


@dataclass(frozen=True, slots=True)
class RoundLRs:
    """The learning rates and residual reset of one round, which every client derives from the
    coordinator state alone so that all of them agree.

    See docs/protocol.md, "Batch size, data index and cold start", and docs/distro.md, "Train step".
    """

    lr: float
    """The LR of this round's step: for training, and for applying round h−2 at its start."""
    prev_lr: float
    """The previous step's LR: the lookahead's."""
    zero_optim: bool
    """Zero the DisTrO residual before training: round 0 of a cold-start epoch."""


def cold_start_bounds(coord: Coordinator) -> tuple[int, int] | None:
    """`(start_step, start_step + cold_start_warmup_steps)` of a cold-start epoch, else None.

    After a pause the run resumes from a checkpoint, and the LR ramps in linearly from the epoch's
    first step so that the first sign-SGD steps, on zeroed residuals, do not undo progress.
    """
    es = coord.epoch_state
    steps = coord.llm.cold_start_warmup_steps
    if not es.cold_start_epoch or steps == 0:
        return None
    return es.start_step, es.start_step + steps


def round_lrs(coord: Coordinator, step: int, height: int) -> RoundLRs:
    """The LRs of the round at `height` (step `step`) of the epoch in `coord`."""
    bounds = cold_start_bounds(coord)
    schedule = coord.llm.lr_schedule
    return RoundLRs(
        lr=lr_for_step(schedule, step, bounds),
        prev_lr=prev_lr_for_step(schedule, step, bounds),
        zero_optim=coord.epoch_state.cold_start_epoch and height == 0,
    )


def round_state_for(coord: Coordinator) -> RoundState:
    """The round that just started in ``coord`` (RoundTrain), with its data assignment."""
    rnd = coord.current_round()
    trains = not coord.last_step_set()
    assignment: dict[BatchId, NodeIdentity] = {}
    if trains:
        assignment = assignment_for(coord, rnd, [c.id for c in coord.epoch_state.clients])
    step = coord.progress.step
    return RoundState(rnd.height, step, trains, assignment, round_lrs(coord, step, rnd.height))


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


def verify_result(result: ReceivedResult, step: int, fmt: ResultFormat) -> bool:
    """The downloaded bytes match the signed commitment and decode under the run's format."""
    return decode_verified(result, step, fmt) is not None


def decode_verified(result: ReceivedResult, step: int, fmt: ResultFormat) -> Any | None:
    """The decoded result if the downloaded bytes match the signed commitment and decode under
    the run's format (a DisTrO :class:`Payload` or a SparseLoCo payload), else None."""
    if result.payload is None:
        return None
    digest = payload_hash(step, result.batch.start, result.batch.end, result.payload)
    if digest != result.data_hash:
        return None
    try:
        return fmt.decode(result.payload)
    except PayloadError:
        return None


def decoded_nbytes(decoded: Any) -> int | None:
    """The tensor bytes of a decoded DisTrO payload; None for anything else (not kept)."""
    if not isinstance(decoded, Payload):
        return None
    flat = decoded.flat
    if flat is not None and flat.results is decoded.results:
        # The decoder's two arrays, of which the tensors are views: two attribute reads where
        # 42 torch ones cost a tenth of holding a result (issue 38).
        return int(flat.idx.nbytes + flat.val.nbytes)
    return sum(r.idx.nbytes + r.val.nbytes for r in decoded.results)


def result_fingerprint(payload: Payload) -> bytes:
    """SHA-256 of what a DisTrO result says — every tensor's indices and value signs — without
    its header (step, interval, nonce), so a copied or replayed result has the fingerprint of its
    original whatever it claims to be (docs/protocol.md, "Threat model and result
    verification"). Other formats: :meth:`ResultFormat.fingerprint`."""
    return distro_fingerprint(payload)


def result_sketch(decoded: Any, fmt: ResultFormat, salt: int | None = None) -> CopySketch:
    """The copy check's sketch of a decoded result, made once when it arrives
    (``psyche.distro.copy_index``); its ``fingerprint`` is ``fmt.fingerprint(decoded)``."""
    if isinstance(fmt, DistroFormat) and isinstance(decoded, Payload):
        # The same sketch from one pass over the payload's tensors (the fingerprint and the
        # keys read the same indices and values, which were converted twice; issue 38).
        return distro_sketch(decoded, salt)
    return sketch(fmt.fingerprint(decoded), fmt.copy_keys(decoded), salt)


def build_witness(proof: WitnessProof, attested: RoundState | None, bloom_seed: int) -> Witness:
    """Blooms over the attested (previous) round's verified results: trainers that delivered,
    and the commitment hash of the first verified result per batch."""
    participants, broadcasts = Bloom.empty(bloom_seed), Bloom.empty(bloom_seed ^ 1)
    if attested is not None:
        for batch, res in attested.results.items():
            if res.payload is None or attested.assignment.get(batch) != res.trainer:
                continue
            if batch in attested.refused:
                continue  # a copy found when the round was settled (settle_copies)
            participants.add(participant_item(res.trainer))
            broadcasts.add(res.data_hash)
    return Witness(proof, participants, broadcasts)


def bloom_seed_for(identity: NodeIdentity, rnd: Round, entropy: bytes = b"") -> int:
    """A per-witness, per-round seed; ``entropy`` (random bytes) keeps it unpredictable."""
    digest = sha256v(
        b"psyche-bloom", identity.signer, rnd.random_seed.to_bytes(8, "little"), entropy
    )
    return int.from_bytes(digest[:8], "little")


def rejected_by_verifiers(coord: Coordinator) -> set[NodeIdentity]:
    """Trainers whose results of round h−2 are left out of the apply at round h (``coord`` is at
    round h): those whose round h−2 result a quorum of round h−1's verifiers rejected, and those
    rejected in round h−2 itself (about h−3), whose h−2 result came from the same trainer in the
    round it was caught. Every client reads the same stored verdicts, so all leave out the same
    results (docs/protocol.md, "Threat model and result verification")."""
    out: set[NodeIdentity] = set()
    for back in (1, 2):
        judging, judged = coord.round_back(back), coord.round_back(back + 1)
        if judging is not None and judged is not None:
            out.update(coord.verdict_outcome(judging, judged).rejected)
    return out


def results_to_apply(
    applied: RoundState, witnesses: Sequence[Witness], coord: Coordinator
) -> list[ReceivedResult]:
    """The results of round ``applied`` that a quorum of ``witnesses`` voted for and the
    verifiers did not reject, in batch order. Batches with no result or no consensus are skipped
    here; the coordinator re-assigns the intervals of ejected and leaving trainers in later
    rounds (``Round.retries``)."""
    out: list[ReceivedResult] = []
    rejected = rejected_by_verifiers(coord)
    for batch in applied.assignment:
        res = applied.results.get(batch)
        if res is None or res.trainer in rejected:
            continue
        if select_consensus_commitment([res.data_hash], witnesses, coord.config) == 0:
            out.append(res)
    return out


def consensus_results_missing(
    applied: RoundState | None, witnesses: Sequence[Witness], coord: Coordinator
) -> list[str]:
    """What of round h−2 the witnesses (stored in round h−1) agree was delivered but this client
    holds no result for, described for a log line; empty when it holds all of it.

    A quorum of witnesses listing a trainer in their participant blooms means they verified its
    result, and then their broadcast blooms hold its hash: the consensus includes it. A client
    with no announcement for it (dropped, never delivered to it, or its round never started
    here: ``applied`` is None) cannot fetch it, since only the announcement names its blob;
    applying the rest would silently leave it with weights unlike its peers'. A result still
    downloading is not missing here (the apply awaits it up to its deadline)."""
    rejected = rejected_by_verifiers(coord)
    if applied is None:
        rnd = coord.previous_previous_round()
        if rnd is None:
            return []
        who = [
            c
            for c in coord.round_clients(rnd)
            if c not in rejected and trainer_healthy(c, witnesses, coord.config)
        ]
        return [f"round {rnd.height} (never started here; trainer {c.hex()[:12]})" for c in who]
    return [
        f"batch {batch} of step {applied.step}"
        for batch, trainer in applied.assignment.items()
        if batch not in applied.results
        and trainer not in rejected
        and trainer_healthy(trainer, witnesses, coord.config)
    ]
