"""One P2P key per wallet (issue 12, finding 4): ``Coordinator.claim_p2p_key`` and the hub's join.

Peers attribute gossip by P2P key, so a join that reuses another wallet's key let that wallet have
the victim's results dropped and the victim ejected. The rule (the Solana program's
``ClientsState::register`` applies the same one, ``programs/.../tests/program_p2p_identity.rs``):
a key held by a different wallet, pending or in the epoch, is refused unless the joiner proves the
key is its own (``p2p_identity == signer``); such a join removes the pending rivals.

The new error is reached through its module (``types.P2PIdentityTakenError``) rather than imported
by name, so that this file also runs against the code before the rule and shows the attack there.
"""

from __future__ import annotations

import pytest

from psyche.backends.centralized.run_host import RunHost
from psyche.coordinator import types
from psyche.coordinator.types import RunState
from psyche.protocol.identity import NodeIdentity

from ..backends.support import Clock, make_coordinator

RS = RunState


def key(n: int) -> bytes:
    return bytes([n]) * 32


def wallet(n: int, p2p: int | None = None) -> NodeIdentity:
    """Wallet ``n`` with P2P key ``p2p`` (its own wallet key when None: a proven claim)."""
    return NodeIdentity(signer=key(n), p2p_identity=key(n if p2p is None else p2p))


def _hub(**config: int) -> tuple[RunHost, Clock]:
    hub = RunHost(make_coordinator(**config))
    return hub, Clock(hub)


def _holders(hub: RunHost, p2p: bytes) -> list[NodeIdentity]:
    return [c.id for c in hub.coordinator.epoch_state.clients if c.id.p2p_identity == p2p]


# --- the rule ----------------------------------------------------------------------------------


def test_a_key_pending_for_another_wallet_is_refused() -> None:
    coord = make_coordinator()
    victim, attacker = wallet(1, p2p=9), wallet(2, p2p=9)
    with pytest.raises(types.P2PIdentityTakenError, match="P2PIdentityTaken"):
        coord.claim_p2p_key(attacker, [victim])
    # The holder itself, a fresh key and a key nobody holds are fine.
    assert coord.claim_p2p_key(victim, [victim]) == []
    assert coord.claim_p2p_key(wallet(2, p2p=8), [victim]) == []


def test_a_key_of_the_epoch_is_refused_even_with_nobody_pending() -> None:
    hub, clock = _hub()
    members = [wallet(1, p2p=9), wallet(2, p2p=8)]
    for m in members:
        hub.join(m)
    clock.until(RS.Warmup)
    clock.warm_up(members)
    assert hub.coordinator.run_state is RS.RoundTrain
    with pytest.raises(types.P2PIdentityTakenError):
        hub.coordinator.claim_p2p_key(wallet(3, p2p=9), [])


def test_a_proven_join_takes_its_key_back_from_the_pending_rivals() -> None:
    coord = make_coordinator()
    owner, squatter, other = wallet(1), wallet(2, p2p=1), wallet(3)
    assert coord.claim_p2p_key(owner, [squatter, other]) == [squatter]
    # Proven also against an epoch client holding the key: that one keeps its place until the
    # epoch ends, only pending rivals are removed.
    assert coord.claim_p2p_key(owner, []) == []


# --- the hub (the centralized server's membership) ---------------------------------------------


def test_a_second_wallet_cannot_enter_the_epoch_with_the_victims_key() -> None:
    hub, clock = _hub(init_min_clients=2)
    victim, attacker, bystander = wallet(1, p2p=9), wallet(2, p2p=9), wallet(3, p2p=8)
    hub.join(victim)
    refused: Exception | None = None
    try:
        hub.join(attacker)
    except Exception as e:  # the error type exists only with the rule
        refused = e
    hub.join(bystander)
    clock.until(RS.Warmup)
    # Before the rule the attacker entered the epoch with the victim's key, and peers attributed
    # the victim's gossip to whichever of the two came first.
    assert _holders(hub, key(9)) == [victim]
    assert isinstance(refused, types.P2PIdentityTakenError)
    assert list(hub.pending) == [victim, bystander]


def test_a_refused_join_changes_nothing() -> None:
    hub, _ = _hub()
    hub.join(wallet(1, p2p=9))
    before = dict(hub.pending)
    with pytest.raises(types.P2PIdentityTakenError):
        hub.join(wallet(2, p2p=9))
    assert hub.pending == before


def test_the_owner_of_a_key_displaces_a_squatter() -> None:
    hub, clock = _hub(init_min_clients=2)
    owner, squatter, other = wallet(1), wallet(2, p2p=1), wallet(3)
    hub.join(squatter)  # registers the owner's (public) key before the owner joins
    hub.join(other)
    hub.join(owner)
    assert list(hub.pending) == [other, owner]
    with pytest.raises(types.P2PIdentityTakenError):
        hub.join(squatter)
    clock.until(RS.Warmup)
    assert _holders(hub, key(1)) == [owner]


def test_a_rejoin_with_a_new_key_releases_the_old_one() -> None:
    hub, _ = _hub()
    hub.join(wallet(1, p2p=9))
    hub.join(wallet(2, p2p=7))
    hub.join(wallet(1, p2p=8))  # same wallet, new P2P key: same place, new key
    assert [p.p2p_identity for p in hub.pending] == [key(8), key(7)]
    hub.join(wallet(3, p2p=9))
    assert [p.signer for p in hub.pending] == [key(1), key(2), key(3)]
