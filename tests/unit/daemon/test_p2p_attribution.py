"""Gossip attribution when an epoch lists one P2P key under two wallets (issue 12, finding 4).

Coordinators now refuse such a join (``Coordinator.claim_p2p_key``, the program's
``P2PIdentityTaken``), but a daemon must not let list order decide whose a key is should an epoch
still hold one twice (a coordinator from before the rule). It used to attribute every message of
the key to the first holder, so a squatter listed before the key's owner got the owner's results
dropped ("not its batch") and the owner counted as silent, then ejected.

Drives ``GossipRouter.on_announcement`` (what the gossip loop calls for each verified message)
on a simulated first training round; nothing is fetched (the fake node never answers).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from psyche.daemon.epoch import EpochView
from psyche.daemon.gossip import GossipRouter
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import Holdings, client_parts
from psyche.daemon.rounds import RoundState, round_state_for
from psyche.distro import DistroConfig, PayloadSpec
from psyche.distro.result_format import DistroFormat
from psyche.events import EventLog
from psyche.p2p.messages import Finished, TrainingResult, WireCommitment
from psyche.protocol.commitment import make_commitment
from psyche.protocol.identity import NodeIdentity, SecretKey
from support.configs import two_client_config
from support.rounds import first_round

from ..backends.support import make_model

OWNER, RECEIVER, SQUATTER = (SecretKey.from_bytes(bytes([i]) * 32) for i in (1, 2, 3))
SPEC = PayloadSpec.from_model(
    {"w": (4, 4)},
    DistroConfig(
        compression_decay=0.999, compression_topk=2, compression_chunk=4, quantize_1bit=False
    ),
)


class _Node:
    """The receiver's P2P node: fetches never finish (the test looks before they would)."""

    async def fetch(self, *args: object, **kwargs: object) -> bytes:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def _result(state: RoundState, trainer: NodeIdentity, key: SecretKey) -> TrainingResult:
    batch = state.batch_of(trainer)
    assert batch is not None
    digest = hashlib.sha256(b"payload of %d" % batch.start).digest()
    return TrainingResult(
        step=state.step,
        batch_start=batch.start,
        batch_end=batch.end,
        commitment=WireCommitment.of(make_commitment(key, digest)),
        blob_hash=digest,
        blob_size=64,
        nonce=0,
    )


def test_the_owner_of_a_twice_listed_key_keeps_its_results(tmp_path: Path) -> None:
    owner = OWNER.node_identity()
    squatter = NodeIdentity(SQUATTER.public_key(), OWNER.public_key())  # listed first
    receiver = RECEIVER.node_identity()
    ids = [squatter, owner, receiver]
    coord = first_round(
        ids,
        run_id="attribution",
        config=two_client_config(init_min_clients=len(ids)),
        model=make_model(),
    )
    state = round_state_for(coord)

    async def scenario() -> None:
        parts = client_parts(
            key=RECEIVER,
            backend=None,  # type: ignore[arg-type]
            transport=_Node(),  # type: ignore[arg-type]
            load=lambda c, r: None,  # type: ignore[arg-type,return-value]
            events=EventLog(tmp_path / "events.jsonl", RECEIVER.public_key().hex()),
        )
        epoch = EpochView(coord.progress.epoch, rounds={state.height: state})
        kit = ModelKit(trainer=None, format=DistroFormat(SPEC), data=None)  # type: ignore[arg-type]
        router = GossipRouter(parts, Holdings(coord=coord, epoch=epoch, kit=kit))
        sender = OWNER.public_key()
        try:
            router.on_announcement(sender, _result(state, owner, OWNER), "owner-peer")
            batch = state.batch_of(owner)
            assert batch in state.results, "the owner's result was dropped"
            assert state.results[batch].trainer == owner
            router.on_announcement(sender, Finished(step=state.step, warmup=False), "p")
            assert owner in state.finished
        finally:
            downloads = list(epoch.downloads.values())
            epoch.cancel_downloads()
            await asyncio.gather(*downloads, return_exceptions=True)

    asyncio.run(scenario())
