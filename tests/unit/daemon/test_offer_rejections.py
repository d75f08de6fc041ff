"""A ModelAvailable offer no honest client sends is refused, counted and logged once per peer:
from a client that was not in the previous epoch, for another step than the run's, or naming a
manifest the majority does not (issue 12, finding 8; these were dropped without a trace)."""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from psyche.checkpoint.p2p import PeerFetchError
from psyche.coordinator import Client, Coordinator, RunState
from psyche.coordinator.scripted_clients import Sim
from psyche.daemon.sharing import ModelSharing, SharingOptions
from psyche.p2p.errors import BlobNotFound
from psyche.p2p.messages import ModelAvailable
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.rejections import Rejection, Rejections
from psyche.protocol.identity import SecretKey
from psyche.protocol.run_file import load_run_config

TINY = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"
LOG = logging.getLogger("test.offers")


def _epoch0(keys: list[SecretKey]) -> Coordinator:
    rc = load_run_config(TINY)
    sim = Sim(Coordinator(run_id="t", config=rc.config, model=rc.model,
                          run_state=RunState.WaitingForMembers))  # fmt: skip
    ids = [k.node_identity() for k in keys]
    sim.tick(ids)
    sim.advance(2)
    sim.tick(ids)
    sim.send_warmup_witnesses()
    assert sim.coord.run_state is RunState.RoundTrain
    return sim.coord


class _NobodyServes:
    """The node a joiner fetches through: here every peer lacks every blob."""

    async def fetch_detailed(self, blob_hash: bytes, **_: Any) -> Any:
        raise BlobNotFound("nobody has it")


def test_untrusted_wrong_step_and_minority_offers_are_counted_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    me, a, b, d, late = (SecretKey.generate() for _ in range(5))
    epoch0 = _epoch0([me, a, b, d])
    rejections = Rejections(LOG)
    sharing = ModelSharing(me, _NobodyServes(), SharingOptions(), rejections)  # type: ignore[arg-type]
    sharing.observe(epoch0)
    nxt = copy.deepcopy(epoch0)
    nxt.progress.epoch = 1
    nxt.run_state = RunState.Warmup
    nxt.epoch_state.clients = [Client(id=k.node_identity()) for k in (me, a, b, d, late)]
    sharing.observe(nxt)
    step = nxt.progress.step

    def offer(manifest: int, at: int = step) -> ModelAvailable:
        return ModelAvailable(
            step=at, manifest_hash=bytes([manifest]) * 32, manifest_size=9, nonce=0
        )

    for _ in range(5):
        sharing.on_offer(late.public_key(), offer(1), nxt)  # joined after epoch 0
        sharing.on_offer(a.public_key(), offer(1, at=step + 1), nxt)  # a step nobody is at
    assert rejections.count(Rejection.forged_model_available) == 10
    sharing.on_offer(a.public_key(), offer(1), nxt)
    sharing.on_offer(b.public_key(), offer(1), nxt)
    sharing.on_offer(d.public_key(), offer(2), nxt)  # outvoted by a and b
    with pytest.raises(PeerFetchError, match="peers unreachable"):
        asyncio.run(sharing.fetch(nxt))
    assert rejections.count(Rejection.forged_model_available) == 11
    lines = [r.getMessage() for r in caplog.records if r.name == LOG.name]
    assert len(lines) == 3
    assert peer_id_for(late.public_key()) in lines[0] and "previous epoch" in lines[0]
    assert peer_id_for(a.public_key()) in lines[1] and f"step {step + 1}" in lines[1]
    assert peer_id_for(d.public_key()) in lines[2] and "majority" in lines[2]
