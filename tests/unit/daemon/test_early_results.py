"""Results and Finished that arrive before this client starts their round are held, bounded.

Drives ``GossipRouter.on_announcement`` (what the gossip loop calls for each verified message) and
``GossipRouter.round_opened`` (what a training step calls once its round is recorded) on a
simulated first training round; nothing is fetched (the fake node never answers). Before the
fix a result for a round not started here was refused as ``future_result`` and lost, and the
client then applied fewer results than the witnesses' consensus: its weights diverged.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from psyche.coordinator.coordinator import Coordinator
from psyche.daemon.epoch import (
    EARLY_PER_SENDER,
    EARLY_STEPS_AHEAD,
    EARLY_TOTAL,
    Early,
    EarlyAnnouncements,
    EpochView,
)
from psyche.daemon.gossip import GossipRouter
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import Holdings, client_parts
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundState,
    build_witness,
    consensus_results_missing,
    round_state_for,
)
from psyche.distro import DistroConfig, PayloadSpec
from psyche.distro.result_format import DistroFormat
from psyche.events import EventLog
from psyche.p2p.messages import Finished, TrainingResult, WireCommitment
from psyche.p2p.rejections import Rejection
from psyche.protocol.commitment import make_commitment
from psyche.protocol.committee import WitnessProof
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import SecretKey
from support.configs import two_client_config
from support.rounds import first_round

from ..backends.support import make_model

A, B, ME = (SecretKey.from_bytes(bytes([i]) * 32) for i in (1, 2, 3))
SPEC = PayloadSpec.from_model(
    {"w": (4, 4)},
    DistroConfig(
        compression_decay=0.999, compression_topk=2, compression_chunk=4, quantize_1bit=False
    ),
)


class _Node:
    """This client's P2P node: fetches never finish (the test looks before they would)."""

    async def fetch_detailed(self, *args: object, **kwargs: object) -> object:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def _next_round(state: RoundState) -> RoundState:
    """The round after ``state``, as this client would record it (same batches, for brevity)."""
    return RoundState(state.height + 1, state.step + 1, True, dict(state.assignment), state.lrs)


def _result(step: int, batch: BatchId, key: SecretKey) -> TrainingResult:
    digest = hashlib.sha256(b"payload of %d at %d" % (batch.start, step)).digest()
    return TrainingResult(
        step=step,
        batch_start=batch.start,
        batch_end=batch.end,
        commitment=WireCommitment.of(make_commitment(key, digest)),
        blob_hash=digest,
        blob_size=64,
        nonce=0,
    )


@contextmanager
def _router(
    tmp_path: Path, transport: object = None
) -> Iterator[tuple[GossipRouter, EpochView, RoundState, Coordinator]]:
    ids = [A.node_identity(), B.node_identity(), ME.node_identity()]
    coord = first_round(
        ids,
        run_id="early",
        config=two_client_config(init_min_clients=len(ids), min_clients=2, witness_nodes=2),
        model=make_model(),
    )
    state = round_state_for(coord)
    parts = client_parts(
        key=ME,
        backend=None,  # type: ignore[arg-type]
        transport=transport or _Node(),  # type: ignore[arg-type]
        load=lambda c, r: None,  # type: ignore[arg-type,return-value]
        events=EventLog(tmp_path / "events.jsonl", ME.public_key().hex()),
    )
    epoch = EpochView(coord.progress.epoch, rounds={state.height: state})
    kit = ModelKit(trainer=None, format=DistroFormat(SPEC), data=None)  # type: ignore[arg-type]
    router = GossipRouter(parts, Holdings(coord=coord, epoch=epoch, kit=kit))
    yield router, epoch, state, coord


def test_a_result_and_finished_that_come_before_their_round_are_taken_when_it_starts(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with _router(tmp_path) as (router, epoch, state, _coord):
            nxt = _next_round(state)
            a_batch = state.batch_of(A.node_identity())
            assert a_batch is not None
            router.on_announcement(A.public_key(), _result(nxt.step, a_batch, A), "peer-a")
            router.on_announcement(A.public_key(), Finished(step=nxt.step, warmup=False), "peer-a")
            # A repeat while held is neither kept twice nor refused.
            router.on_announcement(A.public_key(), _result(nxt.step, a_batch, A), "peer-a")
            assert router.parts.rejections.counts() == {}, "the early result was refused"
            assert epoch.early.total == 2

            # The round starts here: recorded, then the held announcements are taken.
            epoch.rounds[nxt.height] = nxt
            router.round_opened(epoch, nxt)
            assert a_batch in nxt.results, "the held result was not taken"
            assert nxt.results[a_batch].trainer == A.node_identity()
            assert (nxt.height, a_batch) in epoch.downloads, "its download did not start"
            assert A.node_identity() in nxt.finished
            assert epoch.early.total == 0
            assert router.parts.rejections.counts() == {}
            epoch.cancel_downloads()

    asyncio.run(scenario())


def test_results_too_far_ahead_or_over_the_bounds_are_refused_as_future(tmp_path: Path) -> None:
    async def scenario() -> None:
        with _router(tmp_path) as (router, epoch, state, coord):
            rejections = router.parts.rejections
            a_batch = state.batch_of(A.node_identity())
            b_batch = state.batch_of(B.node_identity())
            assert a_batch is not None and b_batch is not None
            far = max(coord.progress.step, state.step) + EARLY_STEPS_AHEAD + 1
            router.on_announcement(A.public_key(), _result(far, a_batch, A), "peer-a")
            assert rejections.counts() == {"future_result": 1}
            assert epoch.early.total == 0

            # A flooding member: distinct results for the next round, one past its bound.
            step = state.step + 1
            for i in range(EARLY_PER_SENDER + 3):
                fake = BatchId(1_000 + 10 * i, 1_009 + 10 * i)
                router.on_announcement(A.public_key(), _result(step, fake, A), "peer-a")
            assert epoch.early.total == EARLY_PER_SENDER
            assert rejections.counts() == {"future_result": 4}
            # ...costs only itself: another member's early result is still held and taken.
            router.on_announcement(B.public_key(), _result(step, b_batch, B), "peer-b")
            assert epoch.early.total == EARLY_PER_SENDER + 1
            nxt = _next_round(state)
            epoch.rounds[nxt.height] = nxt
            router.on_announcement(B.public_key(), _result(step, b_batch, B), "peer-b")
            router.round_opened(epoch, nxt)
            assert b_batch in nxt.results
            # The flooder's fakes are for batches nobody assigned it: refused as such now.
            assert rejections.counts() == {"future_result": 4, "other_batch": EARLY_PER_SENDER}

            # A result for a round already started here but forgotten is stale, not held.
            epoch.rounds.pop(state.height)
            router.on_announcement(A.public_key(), _result(state.step, a_batch, A), "peer-a")
            assert rejections.count(Rejection.stale_result) == 1
            epoch.cancel_downloads()

    asyncio.run(scenario())


def test_results_held_for_a_round_that_never_starts_here_are_counted_when_dropped(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with _router(tmp_path) as (router, epoch, state, _coord):
            a_batch = state.batch_of(A.node_identity())
            assert a_batch is not None
            skipped = _next_round(state)
            after = _next_round(skipped)
            router.on_announcement(A.public_key(), _result(skipped.step, a_batch, A), "peer-a")
            router.on_announcement(A.public_key(), _result(after.step, a_batch, A), "peer-a")
            assert router.parts.rejections.counts() == {}
            # This client never sees the round of ``skipped`` (a coalesced state): when the one
            # after it starts, the result held for the skipped round is dropped and counted.
            epoch.rounds[after.height] = after
            router.round_opened(epoch, after)
            assert router.parts.rejections.counts() == {"future_result": 1}
            assert a_batch in after.results and epoch.early.total == 0
            # And at the epoch's end, whatever is still held is counted too.
            later = _next_round(after)
            router.on_announcement(A.public_key(), _result(later.step, a_batch, A), "peer-a")
            router.epoch_ended(epoch)
            assert router.parts.rejections.counts() == {"future_result": 2}
            epoch.cancel_downloads()

    asyncio.run(scenario())


def test_the_total_bound_holds_whatever_the_number_of_senders() -> None:
    early = EarlyAnnouncements()
    done = Finished(step=5, warmup=False)
    senders = EARLY_TOTAL // EARLY_PER_SENDER + 2
    kept = 0
    for s in range(senders):
        for i in range(EARLY_PER_SENDER):
            sender = s.to_bytes(2, "little") * 16
            kept += early.hold(Early(sender, Finished(step=5 + i, warmup=False), "p"))
    assert kept == EARLY_TOTAL == early.total
    assert not early.hold(Early(b"\xff" * 32, done, "p"))
    ready, dropped = early.take(5)
    assert len(ready) == EARLY_TOTAL // EARLY_PER_SENDER and not dropped
    assert early.total == EARLY_TOTAL - len(ready)


def test_a_consensus_result_this_client_never_received_is_reported_missing() -> None:
    ids = [A.node_identity(), B.node_identity(), ME.node_identity()]
    coord = first_round(
        ids,
        run_id="early",
        config=two_client_config(init_min_clients=len(ids), min_clients=2, witness_nodes=2),
        model=make_model(),
    )
    state = round_state_for(coord)
    # What the witnesses verified: every trainer's result.
    seen = RoundState(state.height, state.step, True, dict(state.assignment), state.lrs)
    for batch, who in state.assignment.items():
        seen.results[batch] = ReceivedResult(who, batch, bytes([batch.start % 256]) * 32, b"x")
    witnesses = [build_witness(WitnessProof(i, i, True), seen, 7 + i) for i in range(2)]
    # This client holds all but A's: A's is missing (the others are not, downloaded or not).
    mine = RoundState(state.height, state.step, True, dict(state.assignment), state.lrs)
    a_batch = state.batch_of(A.node_identity())
    for batch, who in state.assignment.items():
        if batch != a_batch:
            mine.results[batch] = ReceivedResult(who, batch, seen.results[batch].data_hash)
    missing = consensus_results_missing(mine, witnesses, coord)
    assert missing == [f"batch {a_batch} of step {state.step}"]
    assert consensus_results_missing(seen, witnesses, coord) == []
    # Witnesses that saw nothing make nothing missing.
    empty = [build_witness(WitnessProof(i, i, True), None, 7 + i) for i in range(2)]
    assert consensus_results_missing(mine, empty, coord) == []
