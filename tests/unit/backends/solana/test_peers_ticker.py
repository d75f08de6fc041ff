"""Rendezvous parsing and the pure tick prediction."""

from __future__ import annotations

import pytest

from psyche.backends.solana.peers import BootstrapDirectory, BootstrapError, parse_bootstrap_peers
from psyche.backends.solana.ticker import predicts_transition, tick_probability
from psyche.coordinator import Coordinator, RunState
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.identity import NodeIdentity
from psyche.solana.snapshot import RegisteredClient, RunSnapshot
from support.configs import two_client_config

from ..support import make_model

T0 = 1_700_000_000


def test_bootstrap_peers_are_filed_under_their_key() -> None:
    k1, k2 = bytes([1]) * 32, bytes([2]) * 32
    a = f"/ip4/10.0.0.1/tcp/4001/p2p/{peer_id_for(k1)}"
    b = f"/ip4/10.0.0.2/tcp/4001/p2p/{peer_id_for(k2)}"
    c = f"/dns4/x.example/tcp/1/p2p/{peer_id_for(k1)}"
    peers = parse_bootstrap_peers(f"{a}, {b}\n{c}")
    assert peers == {k1: [a, c], k2: [b]}
    d = BootstrapDirectory(peers)
    d.learn(k2, [b, "/ip4/1.2.3.4/tcp/9/p2p/x"])
    assert len(d.peer_addrs()[k2]) == 2
    assert parse_bootstrap_peers(None) == {} and parse_bootstrap_peers("") == {}


@pytest.mark.parametrize("bad", ["/ip4/1.2.3.4/tcp/1", "/ip4/1.2.3.4/tcp/1/p2p/notapeer"])
def test_bad_bootstrap_peers_are_rejected(bad: str) -> None:
    with pytest.raises(BootstrapError):
        parse_bootstrap_peers(bad)


def _wfm(n_pending: int, init_min: int) -> RunSnapshot:
    c = Coordinator(
        run_id="t", config=two_client_config(init_min_clients=init_min), model=make_model()
    )
    c.run_state = RunState.WaitingForMembers
    c.run_state_start_unix_timestamp = T0
    ids = [NodeIdentity(bytes([i + 1]) * 32, bytes([i + 1]) * 32) for i in range(n_pending + 1)]
    clients = [RegisteredClient(i, 2) for i in ids[:n_pending]] + [RegisteredClient(ids[-1], 1)]
    return RunSnapshot(nonce=1, coordinator=c, clients=clients, next_active=2)


def test_prediction_in_waiting_for_members() -> None:
    snap = _wfm(2, 2)
    assert len(snap.pending()) == 2  # the stale registration (active 1) is not pending
    assert not predicts_transition(snap, T0)  # the grace second has not passed
    assert predicts_transition(snap, T0 + 1)
    assert not predicts_transition(_wfm(1, 2), T0 + 100)  # too few pending
    assert tick_probability(snap) == 1.0
    assert tick_probability(_wfm(8, 2)) == 0.25


def test_no_prediction_on_a_halted_run() -> None:
    snap = _wfm(2, 2)
    snap.coordinator.run_state = RunState.Paused
    assert not predicts_transition(snap, T0 + 100)
