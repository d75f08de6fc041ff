"""A joiner trusts offers from the previous epoch's clients only (docs/protocol.md item 13)."""

from __future__ import annotations

import copy

from psyche.coordinator import Client, RunState
from psyche.coordinator.scripted_clients import sim_identity
from psyche.daemon.sharing import ModelSharing, SharingOptions
from psyche.protocol.identity import SecretKey

from ..daemon.test_rounds import training_coordinator


def test_previous_epoch_members_that_rejoined_are_the_trusted_peers() -> None:
    me = SecretKey.generate()
    sharing = ModelSharing(me, node=None, options=SharingOptions())  # type: ignore[arg-type]
    epoch0 = training_coordinator()
    old = [c.id.p2p_identity for c in epoch0.epoch_state.clients]

    # A client that did not watch the previous epoch trusts every other current client.
    nxt = copy.deepcopy(epoch0)
    nxt.progress.epoch = 1
    nxt.run_state = RunState.Warmup
    stranger = sim_identity(9)
    nxt.epoch_state.clients = [epoch0.epoch_state.clients[0], Client(id=stranger)]
    assert sharing.trusted_peers(nxt) == {old[0], stranger.p2p_identity}

    # Having watched epoch 0, it trusts only epoch-0 clients that are in epoch 1.
    sharing.observe(epoch0)
    assert sharing.trusted_peers(nxt) == {old[0]}
