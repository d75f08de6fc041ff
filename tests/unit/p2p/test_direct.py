"""``/psyche/tell/1`` over in-memory streams: delivered as gossip from the stream's peer,
members only, bounded in size and rate, unreachable members counted."""

from __future__ import annotations

import logging

import trio
import trio.testing

from psyche.p2p.control import Delivery
from psyche.p2p.host.blobs import ByteStream
from psyche.p2p.host.direct import (
    TELL_BURST,
    DirectAnnouncements,
    TellBudget,
    encode_tell,
)
from psyche.p2p.host.peers import HostCounters
from psyche.p2p.messages import MAX_ANNOUNCEMENT
from psyche.p2p.rejections import Rejections

from .test_blobs import Stream

log = logging.getLogger("test.direct")


class _Host:
    """One host's end: its deliveries, counters and rejections."""

    def __init__(self, me: str, allowed: set[str]) -> None:
        self.me = me
        self.counters = HostCounters()
        self.rejections = Rejections(log)
        self.send_in, self.receive = trio.open_memory_channel[Delivery](64)
        self.allowed = allowed
        self.direct: DirectAnnouncements | None = None

    def deliver(self, origin: str, data: bytes) -> None:
        self.send_in.send_nowait(Delivery(from_peer=origin, data=data))

    def got(self) -> list[Delivery]:
        out = []
        while True:
            try:
                out.append(self.receive.receive_nowait())
            except trio.WouldBlock:
                return out


def _network(names: dict[str, set[str]]) -> dict[str, _Host]:
    return {name: _Host(name, allowed) for name, allowed in names.items()}


async def _wire(
    hosts: dict[str, _Host],
    nursery: trio.Nursery,
    unreachable: set[str],
    connected: set[str] | None = None,
) -> list[str]:
    """Wires every host's :class:`DirectAnnouncements`; returns the peers dialled, in order."""
    opened: list[str] = []
    for host in hosts.values():

        async def open_stream(peer: str, me: str = host.me) -> ByteStream:
            opened.append(peer)
            if peer in unreachable or peer not in hosts:
                raise ConnectionRefusedError(f"cannot dial {peer}")
            ours, theirs = trio.testing.memory_stream_pair()
            handler = hosts[peer].direct
            assert handler is not None
            nursery.start_soon(handler.handle, Stream(theirs), me)
            return Stream(ours)

        host.direct = DirectAnnouncements(
            host.deliver,
            open_stream,
            host.allowed.__contains__,
            host.counters,
            host.rejections,
            None if connected is None else (lambda: connected),
        )
    return opened


def test_a_member_told_directly_gets_the_message_as_gossip_from_the_sender() -> None:
    hosts = _network({"a": {"b", "c", "d"}, "b": {"a"}, "c": {"a"}, "d": {"a"}})

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await _wire(hosts, nursery, unreachable={"d"})
            direct = hosts["a"].direct
            assert direct is not None
            await direct.send(["b", "c", "d", "outsider"], b"signed announcement")
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()

    trio.run(scenario)
    for name in ("b", "c"):
        assert hosts[name].got() == [Delivery(from_peer="a", data=b"signed announcement")]
        assert hosts[name].counters.told_received == 1
    # The outsider is not a member: never dialled. The unreachable member is counted.
    assert hosts["a"].counters.told == 2 and hosts["a"].counters.told_failed == 1


def test_only_connected_members_are_told_and_the_others_counted() -> None:
    # A member that is gone or being redialled would hold a send slot for the whole deadline.
    hosts = _network({"a": {"b", "c"}, "b": {"a"}, "c": {"a"}})
    opened: list[list[str]] = []

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            opened.append(await _wire(hosts, nursery, unreachable=set(), connected={"b"}))
            direct = hosts["a"].direct
            assert direct is not None
            await direct.send(["b", "c"], b"r")
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()

    trio.run(scenario)
    assert opened == [["b"]]
    assert [d.data for d in hosts["b"].got()] == [b"r"] and hosts["c"].got() == []
    assert hosts["a"].counters.told == 1 and hosts["a"].counters.told_failed == 1


def test_a_non_member_or_oversized_message_is_refused_and_counted() -> None:
    hosts = _network({"a": {"b"}, "b": set(), "c": {"a"}})

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await _wire(hosts, nursery, unreachable=set())
            a = hosts["a"].direct
            assert a is not None
            await a.send(["b"], b"hello")  # b does not count a as a member
            c = hosts["c"].direct
            assert c is not None
            ours, theirs = trio.testing.memory_stream_pair()
            nursery.start_soon(c.handle, Stream(theirs), "a")
            too_long = (MAX_ANNOUNCEMENT + 1).to_bytes(2, "big")
            await Stream(ours).write(too_long + b"x" * 10)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()

    trio.run(scenario)
    assert hosts["b"].got() == [] and hosts["c"].got() == []
    assert hosts["b"].rejections.counts() == {"non_member_gossip": 1}
    assert hosts["b"].counters.dropped_not_allowed == 1
    assert hosts["c"].rejections.counts() == {"oversized_gossip": 1}
    assert hosts["c"].counters.dropped_oversize == 1


def test_a_peer_past_its_budget_is_refused_until_it_refills() -> None:
    budget = TellBudget(burst=TELL_BURST, refill_per_s=1.0)
    assert all(budget.take("p", 0.0) for _ in range(TELL_BURST))
    assert not budget.take("p", 0.0)
    assert budget.take("q", 0.0)  # each peer has its own
    assert not budget.take("p", 0.5)
    assert budget.take("p", 1.6) and not budget.take("p", 1.6)
    budget.retain(frozenset({"q"}))
    assert budget.take("p", 1.6)  # a peer that left and came back starts full


def test_a_flooding_member_costs_only_its_own_messages() -> None:
    hosts = _network({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}})
    floods = TELL_BURST + 8

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await _wire(hosts, nursery, unreachable=set())
            a, c = hosts["a"].direct, hosts["c"].direct
            assert a is not None and c is not None
            for i in range(floods):
                await a.send(["b"], f"flood {i}".encode())
            await c.send(["b"], b"honest")
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()

    trio.run(scenario, clock=trio.testing.MockClock())  # no refill while it floods
    got = hosts["b"].got()
    assert [d.data for d in got if d.from_peer == "c"] == [b"honest"]
    assert sum(1 for d in got if d.from_peer == "a") == TELL_BURST
    assert hosts["b"].rejections.counts() == {"tell_over_limit": floods - TELL_BURST}


def test_the_frame_is_a_length_then_the_bytes() -> None:
    assert encode_tell(b"abc") == b"\x00\x03abc"
    for bad in (b"", b"x" * (MAX_ANNOUNCEMENT + 1)):
        try:
            encode_tell(bad)
        except ValueError:
            continue
        raise AssertionError(f"{len(bad)} bytes encoded")
