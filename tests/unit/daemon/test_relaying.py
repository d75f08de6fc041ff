"""The relay keeper: reserve on reachable members only when NAT'd, and publish the circuits."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from psyche.daemon.relaying import RelayKeeper
from psyche.p2p.peer_id import peer_id_for

KEYS = [bytes([i]) * 32 for i in range(1, 6)]
ME = KEYS[0]


def addr(i: int, circuit: bool = False) -> str:
    pid = peer_id_for(KEYS[i])
    if circuit:
        relay = peer_id_for(KEYS[1])
        return f"/ip4/10.0.0.2/tcp/9/p2p/{relay}/p2p-circuit/p2p/{pid}"
    return f"/ip4/10.0.0.{i + 1}/tcp/9/p2p/{pid}"


class Transport:
    def __init__(self, reach: str, accept: set[int]) -> None:
        self.reach = reach
        self.accept = accept
        self.reserved: list[list[str]] = []
        self.listen_addrs = ["/ip4/192.168.1.2/tcp/9"]
        self.direct: set[int] = set()

    def reachability(self) -> str:
        return self.reach

    def direct_peers(self) -> set[str]:
        return {peer_id_for(KEYS[i]) for i in self.direct}

    async def reserve(self, addrs: list[str]) -> list[str]:
        self.reserved.append(list(addrs))
        return [
            f"{a}/p2p-circuit/p2p/{peer_id_for(ME)}"
            for a in addrs
            if any(a == addr(i) for i in self.accept)
        ]


class Directory:
    def __init__(self, known: dict[bytes, list[str]]) -> None:
        self.known = known
        self.published: list[list[str]] = []

    async def publish_p2p_addrs(self, addrs: list[str]) -> None:
        self.published.append(addrs)

    def peer_addrs(self) -> dict[bytes, list[str]]:
        return self.known


def coord(members: list[bytes]) -> Any:
    clients = [SimpleNamespace(id=SimpleNamespace(p2p_identity=k)) for k in members]
    return SimpleNamespace(epoch_state=SimpleNamespace(clients=clients))


def run(keeper: RelayKeeper, members: list[bytes]) -> None:
    async def go() -> None:
        keeper.poll(coord(members))
        if keeper._task is not None:
            await keeper._task

    asyncio.run(go())


def known() -> dict[bytes, list[str]]:
    # KEYS[4] is NAT'd itself: only a circuit address, so it is never asked to relay.
    return {KEYS[i]: [addr(i)] for i in (1, 2, 3)} | {KEYS[4]: [addr(4, circuit=True)]}


def test_a_public_client_reserves_nothing() -> None:
    t, d = Transport("public", {1, 2, 3}), Directory(known())
    run(RelayKeeper(t, d, ME), KEYS)  # type: ignore[arg-type]
    assert t.reserved == [] and d.published == []


def test_a_natd_client_reserves_on_two_reachable_members_and_publishes_the_circuits() -> None:
    t, d = Transport("private", {1, 2, 3}), Directory(known())
    keeper = RelayKeeper(t, d, ME)  # type: ignore[arg-type]
    run(keeper, KEYS)
    assert len(t.reserved) == 1 and len(t.reserved[0]) == 2
    assert all("p2p-circuit" not in a for a in t.reserved[0])
    assert len(keeper.held) == 2 and ME not in keeper.held and KEYS[4] not in keeper.held
    assert d.published == [[*keeper.circuit_addrs, *t.listen_addrs]]
    # Held relays still in the epoch: nothing more to do.
    run(keeper, KEYS)
    assert len(t.reserved) == 1


def test_a_relay_leaving_the_epoch_triggers_a_new_reservation_after_the_retry_delay() -> None:
    now = [0.0]
    t, d = Transport("private", {1, 2, 3}), Directory(known())
    keeper = RelayKeeper(t, d, ME, clock=lambda: now[0], retry_s=10)  # type: ignore[arg-type]
    run(keeper, KEYS)
    gone = keeper.held[0]
    remaining = [k for k in KEYS if k != gone]
    run(keeper, remaining)
    assert len(t.reserved) == 1  # within the retry delay
    now[0] = 11
    run(keeper, remaining)
    assert len(t.reserved) == 2 and gone not in keeper.held


def test_spread_the_natd_clients_choose_relays_by_their_own_hash() -> None:
    picks = set()
    for me in (bytes([50 + i]) * 32 for i in range(8)):
        keeper = RelayKeeper(Transport("private", set()), Directory(known()), me, relays=1)  # type: ignore[arg-type]
        picks.add(keeper.candidates(KEYS)[0][0])
    assert len(picks) > 1


def test_no_relay_accepting_is_retried_later() -> None:
    now = [0.0]
    t, d = Transport("private", set()), Directory(known())
    keeper = RelayKeeper(t, d, ME, clock=lambda: now[0], retry_s=10)  # type: ignore[arg-type]
    run(keeper, KEYS)
    run(keeper, KEYS)
    assert len(t.reserved) == 1 and d.published == []
    now[0] = 10.5
    t.accept = {3}
    run(keeper, KEYS)
    assert len(t.reserved) == 2 and d.published and keeper.held == [KEYS[3]]


def test_members_reached_directly_are_asked_first() -> None:
    t, d = Transport("private", {1, 2, 3}), Directory(known())
    keeper = RelayKeeper(t, d, ME, relays=1)  # type: ignore[arg-type]
    for i in (1, 2, 3):
        t.direct = {i}
        assert keeper.candidates(KEYS)[0][0] == KEYS[i]
