"""The verifier step for SparseLoCo results: audit one link of each sampled trainer's chain.

See docs/protocol.md, "SparseLoCo: the inner-step audit". A SparseLoCo result in a run that
verifies ends in the hashes of its round's inner states S_0 … S_n and error buffers
(``psyche.distro.audit_trailer``). At the start of round ``r + 1``, before its apply (the model
then holds round ``r``'s start weights), each verifier of round ``r + 1`` takes every sampled
result of round ``r`` that it holds and draws one link ``j`` from round ``r + 1``'s seed, the slot
and the trainer (the same step for every verifier of the slot, so that their votes, which are
near-exact, do not split), fetches from the trainer by their committed hashes S_j, S_{j+1}, S_n
and both error buffers, and checks two links:

- the **encode link**: re-encoding the payload from the error buffers before the round, its own
  start weights and S_n's weights must give the very bytes the trainer sent, and the error
  buffers after it (``psyche.training.sparseloco_audit.replay_encode``; exact);
- **inner step** ``j``: S_0 (for ``j = 0``) holds the round's public start weights, and taking
  step ``j`` itself from S_j on the ``j``-th inner batch of the trainer's assigned samples at the
  round's learning rate lands on S_{j+1} (``replay_link``, within its tolerance).

So one audit catches a free rider that skips samples in every inner step, and a payload that is
not its chain's encoding, whatever the draw.

Before any fetch, a public check: when the trainer's result of round ``r − 1`` is in the
consensus every client applies now, its committed error buffers after that round must be the
ones this result commits to before round ``r`` (a trainer's error buffers change only in its own
rounds, or restart at zero when it loads a model, which ends its chain's epoch). Without it a
trainer that did the work could pick its "before" buffers to encode any payload it likes.

Every sampled trainer's states are asked for at once (one whose host stays silent must not
spend the budget of the others) and replayed in slot order as they come.

A failed link or continuity check, a blob that is malformed or does not match its commitment, or
a committed state the trainer offers larger than a state can be votes "mismatch"; a result not
held when the audit starts stays unchecked. A held result whose states did not arrive within the
budget is checked on what it carries itself: the probe of inner step 0
(``psyche.distro.audit_probe``), replayed from this verifier's own weights (the round's start
weights, S_0's) and the gradient of the first inner batch; a probe that does not hold votes
"mismatch" at once. One that holds is not left there: the verifier goes on asking the trainer
for the states, in the background, until half of ``max_round_train_time`` after the audit began
(:data:`SERVE_SHARE`), and votes "mismatch" if the trainer denied holding one until then
(answered "not found", or offered bytes that are not the blob) — a trainer must serve what it
committed to, or a rider honest in step 0 alone could escape every audit by serving nothing.
One that did not answer in time stays unchecked: an audit moves 32–44 bytes per parameter,
which a loaded or distant link may not carry in time, and an honest trainer must not pay for
that. Its witness waits for that vote (``Judgement.settled``). The verdict rides in
the witness through :func:`psyche.daemon.verifying.verdict_of`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from psyche.coordinator import ClientState, Coordinator, Round
from psyche.coordinator.verification import VERIFIERS_PER_ROUND, verify_seed
from psyche.daemon.epoch import EpochView
from psyche.daemon.judgement import Judgement, PendingVote, SlotGradient, SubBatch
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import ClientParts, healthy_index
from psyche.daemon.rounds import ReceivedResult, RoundState, decode_verified, results_to_apply
from psyche.daemon.sparseloco_checks import audit_link, audit_probe, wanted
from psyche.distro.audit_trailer import AuditCommitments
from psyche.distro.result_format import SparseLoCoFormat
from psyche.distro.sparseloco_payload import SparseLoCoPayload
from psyche.p2p.digests import Digest
from psyche.p2p.errors import BlobNotFound, BlobTooLarge, P2PError
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.transport import Transport
from psyche.protocol.identity import NodeIdentity
from psyche.training.sparseloco_audit import (
    link_for,
    state_size,
)
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

__all__ = [
    "SERVE_SHARE",
    "judge_sparseloco",
    "link_of",
    "served",
    "settle_votes",
    "state_bound",
]

log = logging.getLogger("psyche.daemon")

AUDIT_DIGEST = Digest.blake3
"""What the committed hashes, so the audit blobs' P2P ids, are (``sparseloco_audit.state_hash``)."""

SERVE_SHARE = 0.5
"""Of ``max_round_train_time``, from the start of an audit: until when a verifier asks a trainer
for the states its budget did not get, to tell a trainer that denies holding them (voted
against) from one that is slow (unchecked). Twice the audit's own budget (a quarter), so a blob
being written when first asked for has long been served; well before the round's end, so the
verifier's witness, which waits for the vote, is not late."""


def link_of(seed: bytes, slot: int, trainer: bytes, links: int) -> int:
    """The inner step every verifier of ``slot`` audits (of ``links``): fixed by the next
    round's verify seed, which nobody knew when the trainer committed."""
    return link_for(seed + slot.to_bytes(2, "little") + trainer, links)


def state_bound(shapes: tuple[tuple[int, ...], ...]) -> int:
    """The most bytes a committed blob may be: an honest state's exact size."""
    return state_size(shapes)


@dataclass(frozen=True, slots=True)
class _Slot:
    trainer_key: bytes
    payload: bytes
    """The held result's payload bytes, audit trailer left off."""
    link: int
    audit: AuditCommitments
    step: int
    """The result's step: its probe's positions are drawn from it."""


async def judge_sparseloco(
    parts: ClientParts, coord: Coordinator, epoch: EpochView, state: RoundState, kit: ModelKit
) -> None:
    """At the start of round ``state`` (before its apply): when this client is a verifier of it,
    audit one link of each sampled SparseLoCo result of the previous round into
    ``state.judgement``. Nothing when the run does not verify or the client judges nothing."""
    trainer, fmt = kit.trainer, kit.format
    if not isinstance(trainer, SparseLoCoTrainer) or not isinstance(fmt, SparseLoCoFormat):
        return
    me = healthy_index(parts, coord)
    judged = epoch.rounds.get(state.height - 1)
    prev = coord.round_back(1)
    if me is None or prev is None or judged is None or judged.height != prev.height:
        return
    if not judged.trains or not fmt.audit_steps:
        return
    proof = coord.committee_selection(coord.current_round()).get_witness(me)
    if not proof.witness or proof.position >= VERIFIERS_PER_ROUND:
        return
    seed = verify_seed(coord.current_round().random_seed)
    slots = _slots(coord, prev, judged, coord.epoch_state.clients[me].id)
    if not slots:
        return
    begun = time.monotonic()
    deadline = begun + 0.25 * coord.config.max_round_train_time
    t0 = time.perf_counter()
    earlier = _previous_results(coord, epoch, state)
    # Every slot's states are asked for at once and replayed in slot order as they come: asked
    # one after another, a trainer whose host stays silent spent the whole budget of the
    # slots after it, which then got the probe alone (a cost one party put on the others).
    fetching = [
        asyncio.create_task(_prepare(parts, kit, epoch, judged, s, seed, deadline, earlier))
        for s in slots
    ]
    done, unserved = [], []
    try:
        for task in fetching:
            judged_slot, unfetched = await _judge_slot(kit, trainer, judged, await task)
            done.append(judged_slot)
            if unfetched is not None:
                unserved.append((judged_slot, unfetched))
    finally:
        for task in fetching:
            task.cancel()
    serve_s = SERVE_SHARE * coord.config.max_round_train_time
    pending = tuple(
        _pending_vote(parts, trainer, judged, s, at, begun, serve_s) for s, at in unserved
    )
    state.judgement = Judgement(prev.height, tuple(done), fmt, 0, pending)
    log.info(
        "verifier of step %d: audited %d of %d sampled SparseLoCo results in %.3f s",
        state.step,
        sum(1 for s in done if s.audit is not None),
        len(done),
        time.perf_counter() - t0,
    )


def _slots(
    coord: Coordinator, prev: Round, judged: RoundState, mine: NodeIdentity
) -> list[SlotGradient]:
    """The sampled results of the judged round ``prev`` this client audits: all but its own."""
    trainers = coord.round_clients(prev)
    slots = []
    for slot, index in enumerate(coord.judged_sample(coord.current_round(), prev)):
        if index >= len(trainers) or trainers[index] == mine:
            continue
        batch = judged.batch_of(trainers[index])
        if batch is not None:
            slots.append(SlotGradient(slot, trainers[index], batch, SubBatch(())))
    return slots


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A slot as its public checks and fetch left it: ``final`` when that settled it (a
    mismatch, or unchecked); else ``blobs`` are the committed states to replay, or None when
    they did not come in time (then the probe, and the serving)."""

    slot: SlotGradient
    at: _Slot | None = None
    blobs: dict[bytes, bytes] | None = None
    final: bool = False


async def _prepare(
    parts: ClientParts,
    kit: ModelKit,
    epoch: EpochView,
    judged: RoundState,
    s: SlotGradient,
    seed: bytes,
    deadline: float,
    earlier: Mapping[NodeIdentity, tuple[RoundState, ReceivedResult]],
) -> _Prepared:
    """The public checks of slot ``s`` and the fetch of the states its audit needs, within the
    audit's ``deadline``."""
    assert isinstance(kit.format, SparseLoCoFormat)
    prior = earlier.get(s.trainer)
    after = await _chain_end(epoch, prior, kit.format, deadline) if prior is not None else None
    if prior is not None and after is None:
        return _Prepared(s, final=True)  # its previous result is not here in time: unchecked
    held = _held(judged, s, kit.format)
    if held is None:
        return _Prepared(s, final=True)  # not here (yet): unchecked, never holds a round back
    audit = held.decoded.audit
    assert audit is not None  # the run's format requires the trailer
    key = s.trainer.p2p_identity
    link = link_of(seed, s.slot, key, audit.links)
    at = _Slot(key, held.payload, link, audit, held.decoded.step)
    if after is not None and after != (audit.error_before, audit.states[0]):
        why = "its error buffers or moments before the round are not those after its previous round"
        return _Prepared(_logged(judged, s, at, False, why), final=True)
    left = deadline - time.monotonic()
    if left <= 0:  # waiting for its previous result spent the budget
        return _Prepared(s, at)
    assert isinstance(kit.trainer, SparseLoCoTrainer)
    try:
        # The fetch's own deadline is the budget; the outer bound is a margin for a wedged host.
        async with asyncio.timeout(left + 5.0):
            return _Prepared(s, at, await _fetch(parts, kit.trainer, at, left))
    except BlobTooLarge as e:
        # The trainer offers more bytes than any state has: not the state it committed to.
        why = f"its committed state was not served ({e})"
        return _Prepared(_logged(judged, s, at, False, why), final=True)
    except (TimeoutError, P2PError) as e:
        # Out of this verifier's budget, no answer or "not found" yet: too soon to blame the
        # trainer (e2e runs under load had honest ones answer late), so the replay is off but
        # the asking goes on until SERVE_SHARE of the round (see _pending_vote).
        log.warning("audit of slot %d: state not fetched yet (%s)", s.slot, e or "time")
        return _Prepared(s, at)


async def _judge_slot(
    kit: ModelKit, trainer: SparseLoCoTrainer, judged: RoundState, p: _Prepared
) -> tuple[SlotGradient, _Slot | None]:
    """The slot judged, and what to go on fetching when its states did not arrive in time."""
    s, at = p.slot, p.at
    if p.final or at is None:
        return s, None
    if p.blobs is None:  # its states did not come: the probe, then the serving
        return await _probed(kit, trainer, judged, s, at)
    try:
        samples = await asyncio.to_thread(kit.data.get_samples, s.batch)
        ok, why = await asyncio.to_thread(
            partial(audit_link, hashed=True),
            trainer, at.link, at.audit, p.blobs, samples, judged.lrs.lr, at.payload,
        )  # fmt: skip
    except Exception as e:  # a verifier's failure must never cost the round
        log.warning("audit of slot %d failed here: %s; left unchecked", s.slot, e)
        return s, None
    return _logged(judged, s, at, ok, why), None


async def _probed(
    kit: ModelKit, trainer: SparseLoCoTrainer, judged: RoundState, s: SlotGradient, at: _Slot
) -> tuple[SlotGradient, _Slot | None]:
    """A slot whose states did not come within the budget: its result's own probe of inner
    step 0 is replayed now (no network). One that fails is a mismatch at once — a free rider
    whose host stays silent or trickles is caught by what it sent everyone; one that holds
    leaves the trainer's serving to be judged (:func:`_pending_vote`)."""
    try:
        samples = await asyncio.to_thread(kit.data.get_samples, s.batch)
        ok, why = await asyncio.to_thread(
            audit_probe, trainer, at.audit, samples, judged.lrs.lr, at.step
        )
    except Exception as e:  # a verifier's failure must never cost the round
        log.warning("probe of slot %d failed here: %s; left to the serving", s.slot, e)
        return s, at
    if ok:
        log.info("audit of slot %d: its probe of inner step 0 holds", s.slot)
        return s, at
    return _logged(judged, s, replace(at, link=0), False, why), None


def _logged(judged: RoundState, s: SlotGradient, at: _Slot, ok: bool, why: str) -> SlotGradient:
    log.info(
        "audited step %d slot %d %s: step %d of %d %s%s",
        judged.step,
        s.slot,
        s.trainer.hex()[:8],
        at.link,
        at.audit.links,
        "match" if ok else "MISMATCH",
        "" if ok else f" ({why})",
    )
    return replace(s, audit=ok)


def _pending_vote(
    parts: ClientParts,
    trainer: SparseLoCoTrainer,
    judged: RoundState,
    s: SlotGradient,
    at: _Slot,
    begun: float,
    serve_s: float,
) -> PendingVote:
    """Go on asking the trainer of ``s`` for the states its audit needs until ``serve_s``
    seconds after the audit ``begun``: the vote is a mismatch if it denies holding them (the
    replay's budget is spent by then, so only their serving is judged)."""
    serve_by = begun + serve_s

    async def decide() -> bool | None:
        left = serve_by - time.monotonic()
        bound = state_bound(tuple(trainer.shapes))
        need = wanted(at.audit, at.link)
        asked = served(parts.transport, peer_id_for(at.trainer_key), need, bound, serve_by)
        # The margin is for a wedged host of our own: that ends in an exception, unchecked.
        async with asyncio.timeout(left + 5.0):
            ok = await asked
        if ok is False:
            why = f"it denied holding a committed state until {serve_s:g} s after the audit began"
            _logged(judged, s, at, False, why)
        elif ok is None:
            log.info("audit of slot %d: its states did not come in time; left unchecked", s.slot)
        return ok

    task = asyncio.create_task(decide(), name=f"audit-serve-{s.slot}")
    task.add_done_callback(lambda _: parts.woken.set())  # the witness may be sent now
    return PendingVote(s.slot, task)


async def served(
    transport: Transport, peer: str, hashes: Sequence[bytes], bound: int, serve_by: float
) -> bool | None:
    """Whether ``peer`` serves every blob of ``hashes`` (each at most ``bound`` bytes, checked
    against its hash and dropped at once) before the monotonic time ``serve_by``: True when it
    did; False when it denied one — answered that it does not hold it until the deadline, or
    offered more than ``bound`` or bytes that are not the blob (refused as a liar); None when
    it did not answer in time (a slow or busy link, this verifier's or the trainer's, is not
    evidence: an audit moves 32–44 bytes per parameter)."""
    for h in hashes:
        left = serve_by - time.monotonic()
        if left <= 0:
            return None
        try:
            await transport.fetch(
                h,
                from_any_of=[peer],
                max_size=bound,
                timeout=left,
                digest=AUDIT_DIGEST,
                reshare=False,
            )
        except (BlobNotFound, BlobTooLarge):
            return False
        except (TimeoutError, P2PError):
            return None
    return True


def settle_votes(judgement: Judgement, coord: Coordinator) -> Judgement:
    """The judgement as the witness sends it: a slot whose trainer denied holding its states is
    a mismatch while the trainer is still a Healthy client (one that withdrew has left the
    epoch's pay behind and is not slashed for no longer serving); a vote still undecided (the
    round ended first), undecidable (no answer in time) or that failed here is cancelled, its
    slot unchecked."""
    failed = set()
    for p in judgement.pending:
        if not p.task.done():
            p.task.cancel()
        elif not p.task.cancelled() and p.task.exception() is None and p.task.result() is False:
            failed.add(p.slot)
    for s in judgement.slots:
        if s.slot in failed and not _healthy(coord, s.trainer):
            failed.discard(s.slot)
            log.info("slot %d: its trainer left the run; not voted against", s.slot)
    slots = tuple(replace(s, audit=False) if s.slot in failed else s for s in judgement.slots)
    return replace(judgement, slots=slots, pending=())


def _previous_results(
    coord: Coordinator, epoch: EpochView, state: RoundState
) -> dict[NodeIdentity, tuple[RoundState, ReceivedResult]]:
    """The results of the round before the judged one that every client applies now (the
    consensus of the previous round's witnesses), by trainer."""
    before, prev = epoch.rounds.get(state.height - 2), coord.previous_round()
    if before is None or prev is None:
        return {}
    return {r.trainer: (before, r) for r in results_to_apply(before, prev.witnesses, coord)}


async def _chain_end(
    epoch: EpochView,
    prior: tuple[RoundState, ReceivedResult],
    fmt: SparseLoCoFormat,
    deadline: float,
) -> tuple[bytes, bytes] | None:
    """The committed error-buffer and moments hashes after a trainer's previous result, once it
    is here (its download awaited until ``deadline``: every client needs it for this round's
    apply anyway); None when it does not come in time or carries no trailer."""
    before, res = prior
    task = epoch.downloads.get((before.height, res.batch))
    if task is not None:
        await asyncio.wait([task], timeout=max(0.0, deadline - time.monotonic()))
    res = before.results.get(res.batch, res)
    decoded = decode_verified(res, before.step, fmt)
    if not isinstance(decoded, SparseLoCoPayload) or decoded.audit is None:
        return None
    return decoded.audit.error_after, decoded.audit.moments_after


@dataclass(frozen=True, slots=True)
class _Held:
    payload: bytes
    decoded: SparseLoCoPayload


def _held(judged: RoundState, s: SlotGradient, fmt: SparseLoCoFormat) -> _Held | None:
    res = judged.results.get(s.batch)
    if res is None or res.trainer != s.trainer or res.fingerprint is None:
        return None
    decoded = decode_verified(res, judged.step, fmt)
    if not isinstance(decoded, SparseLoCoPayload) or res.payload is None:
        return None
    return _Held(res.payload[: fmt.payload_bytes], decoded)


def _healthy(coord: Coordinator, who: NodeIdentity) -> bool:
    i = coord.index_of(who)
    return i is not None and coord.epoch_state.clients[i].state is ClientState.Healthy


async def _fetch(
    parts: ClientParts,
    trainer: SparseLoCoTrainer,
    at: _Slot,
    budget_s: float,
) -> dict[bytes, bytes]:
    peer = peer_id_for(at.trainer_key)
    bound = state_bound(tuple(trainer.shapes))
    deadline = time.monotonic() + budget_s
    got = {}
    for h in wanted(at.audit, at.link):
        left = max(0.5, deadline - time.monotonic())
        # Not kept once replayed: only the trainer is asked for its states (by name), and each
        # is 12 bytes per parameter, which piled up on tmpfs one audit after another.
        got[h] = await parts.transport.fetch(
            h, from_any_of=[peer], max_size=bound, timeout=left, digest=AUDIT_DIGEST, reshare=False
        )
    return got
