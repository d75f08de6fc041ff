"""A SparseLoCo verifier's votes on whether audited trainers served their committed states
(docs/protocol.md, "A trainer must serve what it committed to"): decided in the background after
the audit's budget, waited for by the witness, and counted as a mismatch only when the trainer
denied holding them and is still a Healthy client."""

from __future__ import annotations

import asyncio

from psyche.coordinator.scripted_clients import sim_identity
from psyche.daemon.judgement import Judgement, PendingVote, SlotGradient, SubBatch
from psyche.daemon.sparseloco_verifying import settle_votes
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity

from .test_rounds import training_coordinator


def _slots(trainers: list[NodeIdentity]) -> tuple[SlotGradient, ...]:
    return tuple(SlotGradient(i, w, BatchId(i, i), SubBatch(())) for i, w in enumerate(trainers))


def test_a_denied_state_is_a_mismatch_and_nothing_else_is() -> None:
    """A trainer that denied holding its states is voted against; "served", "no answer in
    time", an undecided vote (cancelled: the round ended first) and one that failed on the
    verifier's own side leave the slot unchecked."""

    async def run() -> None:
        async def vote(ok: bool | None) -> bool | None:
            return ok

        async def own_failure() -> bool:
            raise TimeoutError("our own host did not answer")

        coord = training_coordinator()
        who = sim_identity(1)
        tasks = [
            asyncio.create_task(vote(False)),
            asyncio.create_task(vote(True)),
            asyncio.create_task(asyncio.sleep(60, result=False)),
            asyncio.create_task(own_failure()),
            asyncio.create_task(vote(None)),
        ]
        judgement = Judgement(
            7, _slots([who] * 6), None, 0,  # type: ignore[arg-type]
            tuple(PendingVote(i, t) for i, t in enumerate(tasks)),
        )  # fmt: skip
        await asyncio.sleep(0.05)
        assert not judgement.settled()  # the witness waits for the undecided one
        settled = settle_votes(judgement, coord)
        assert [s.audit for s in settled.slots] == [False, None, None, None, None, None]
        assert settled.pending == () and settled.settled()
        await asyncio.sleep(0)
        assert tasks[2].cancelled()

    asyncio.run(run())


def test_a_trainer_that_withdrew_is_not_voted_against_for_no_longer_serving() -> None:
    """A trainer that left the run with ``withdraw`` forgoes the epoch's pay; slashing it too for
    the states it no longer serves would punish leaving. One still Healthy is voted against."""

    async def run() -> None:
        coord = training_coordinator()
        stays, leaves = sim_identity(1), sim_identity(2)
        leaving = coord.index_of(leaves)
        assert leaving is not None
        coord.withdraw(leaving)

        async def not_served() -> bool:
            return False

        tasks = [asyncio.create_task(not_served()) for _ in range(2)]
        await asyncio.sleep(0)
        judgement = Judgement(
            7, _slots([stays, leaves]), None, 0,  # type: ignore[arg-type]
            tuple(PendingVote(i, t) for i, t in enumerate(tasks)),
        )  # fmt: skip
        assert judgement.settled()
        assert [s.audit for s in settle_votes(judgement, coord).slots] == [False, None]

    asyncio.run(run())
