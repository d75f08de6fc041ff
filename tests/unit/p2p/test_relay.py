"""NAT traversal without a network: relay limits and admission, circuit addresses, the
reachability verdict, the relay's data pump, the new control frames and reports."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
import trio

from psyche.p2p.control import (
    Counters,
    PeerReport,
    PeerStats,
    Reserve,
    Reserved,
    decode_host,
    decode_parent,
    encode_frame,
)
from psyche.p2p.errors import ControlError
from psyche.p2p.host.peers import HostCounters, NatReport, PeerTable, peer_stats
from psyche.p2p.memory import MemoryNetwork
from psyche.p2p.nat import (
    DEFAULT_RELAY_LIMITS,
    CircuitAddr,
    RelayAdmission,
    RelayLimits,
    RelayRefusal,
    circuit_addr,
    ip_of,
    parse_circuit_addr,
    reachability,
    relay_of,
)
from psyche.p2p.rejections import Rejections
from psyche.protocol.identity import SecretKey

R = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
A = "12D3KooWMdMsyAD1KbY7SY7U6upKrjFNjFo5EXAyNZ7MpdRxLHax"
B = "12D3KooWBznMz5ZSRnvYZZym7do4qdh5d4dCZ1VhiXG9s14nftF7"
RELAY = f"/ip4/10.77.3.10/tcp/4001/p2p/{R}"
MIB = 1 << 20


# ---- limits and admission ---------------------------------------------------------------------


def test_default_limits_are_the_documented_small_ones() -> None:
    limits = DEFAULT_RELAY_LIMITS
    assert limits.max_reservations == 16 and limits.max_reservations_per_peer == 1
    assert limits.max_circuits == 32 and limits.max_circuits_per_source == 8
    assert limits.max_circuits_per_pair == 2
    # Room for a dozen blobs of tens of MB per circuit, and many rounds of time.
    assert limits.circuit_bytes == 256 * MIB and limits.circuit_seconds == 1800
    # Members ping each other every 3 s: only an abandoned or abused circuit is this quiet.
    assert limits.circuit_idle_seconds == 20
    assert limits.reservation_ttl == 900


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_reservations": 0},
        {"circuit_bytes": -1},
        {"max_reservations_per_peer": 2},  # py-libp2p holds one slot per peer id
        {"max_circuits": 4, "max_circuits_per_source": 8},
        {"max_circuits_per_source": 1, "max_circuits_per_pair": 2},
        {"circuit_idle_seconds": 0},
    ],
)
def test_limits_that_the_relay_cannot_keep_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        RelayLimits(**kwargs)


def _admission(members: set[str], **limits: int) -> RelayAdmission:
    return RelayAdmission(RelayLimits(**limits), lambda p: p in members)


def test_only_members_reserve_in_their_own_name_within_the_slot_limit() -> None:
    adm = _admission(
        {A, B},
        max_reservations=1,
        max_circuits_per_pair=1,
        max_circuits_per_source=1,
        max_circuits=1,
    )
    assert adm.reservation(A, None, reserved=0, has_slot=False) is None
    assert adm.reservation(A, A, reserved=0, has_slot=False) is None
    # Claiming someone else's id is refused even for a member (py-libp2p would key the slot
    # by the claimed id).
    assert adm.reservation(A, B, reserved=0, has_slot=False) is RelayRefusal.impersonation
    assert adm.reservation("outsider", None, reserved=0, has_slot=False) is (
        RelayRefusal.not_member
    )
    # Full: a new member is refused, a refresh of an existing slot is not.
    assert adm.reservation(B, None, reserved=1, has_slot=False) is (
        RelayRefusal.too_many_reservations
    )
    assert adm.reservation(A, None, reserved=1, has_slot=True) is None
    assert adm.refusals == {
        RelayRefusal.impersonation: 1,
        RelayRefusal.not_member: 1,
        RelayRefusal.too_many_reservations: 1,
    }


def test_circuits_need_two_members_and_a_reservation() -> None:
    adm = _admission({A, B})
    assert adm.circuit("outsider", A, dest_reserved=True) is RelayRefusal.not_member
    assert adm.circuit(A, "outsider", dest_reserved=True) is RelayRefusal.not_member
    assert adm.circuit(A, A, dest_reserved=True) is RelayRefusal.self_circuit
    assert adm.circuit(B, A, dest_reserved=False) is RelayRefusal.no_reservation
    assert adm.circuit(B, A, dest_reserved=True) is None


def test_circuits_are_bounded_per_pair_and_per_source_never_per_destination() -> None:
    c, d, e = "c-member", "d-member", "e-member"
    adm = _admission({A, B, c, d, e}, max_circuits=16, max_circuits_per_source=3)
    # The attack of issue 26: one member opening many circuits to a NAT'd member A.
    for _ in range(2):
        assert adm.circuit(B, A, dest_reserved=True) is None
        adm.opened(B, A)
    assert adm.circuit(B, A, dest_reserved=True) is RelayRefusal.too_many_pair_circuits
    # B's circuits to A refuse nobody else a circuit to A, however many members hold some.
    for other in (c, d, e):
        assert adm.circuit(other, A, dest_reserved=True) is None
        adm.opened(other, A)
    assert adm.circuit(B, c, dest_reserved=True) is None
    adm.opened(B, c)
    assert adm.circuits_from(B) == 3 and adm.circuits_between(B, A) == 2
    assert adm.circuit(B, d, dest_reserved=True) is RelayRefusal.too_many_source_circuits
    adm.closed(B, A)
    assert adm.circuits_between(B, A) == 1 and adm.circuits_from(B) == 2
    assert adm.circuit(B, d, dest_reserved=True) is None
    assert adm.open_circuits == 5 and adm.circuits_total == 6


def test_a_full_relay_takes_a_circuit_from_the_largest_holder_for_a_smaller_one() -> None:
    c, d = "c-member", "d-member"
    adm = _admission({A, B, c, d}, max_circuits=4, max_circuits_per_source=3)
    for dest in (A, A, c):
        adm.opened(B, dest)
    adm.opened(c, A)
    assert adm.full()
    # d holds none, B holds three: B's share gives way (the relay resets one of B's).
    assert adm.circuit(d, A, dest_reserved=True) is None and adm.fair_victim(d) == B
    adm.closed(B, A)
    adm.opened(d, A)
    # Now B 2, c 1, d 1: c may not push B below itself, nor take d's.
    assert adm.fair_victim(c) is None
    assert adm.circuit(c, B, dest_reserved=True) is RelayRefusal.too_many_circuits
    assert adm.fair_victim(A) == B  # a member holding none still gets one of B's two
    assert adm.refusals[RelayRefusal.too_many_circuits] == 1


def test_a_new_allow_list_applies_to_the_next_request() -> None:
    members = {A, B}
    adm = RelayAdmission(DEFAULT_RELAY_LIMITS, lambda p: p in members)
    assert adm.reservation(A, None, reserved=0, has_slot=False) is None
    members.discard(A)
    assert adm.reservation(A, None, reserved=0, has_slot=True) is RelayRefusal.not_member
    assert adm.circuit(B, A, dest_reserved=True) is RelayRefusal.not_member


# ---- addresses ------------------------------------------------------------------------------


def test_circuit_addresses_are_built_and_taken_apart() -> None:
    addr = circuit_addr(RELAY, A)
    assert addr == f"{RELAY}/p2p-circuit/p2p/{A}"
    assert parse_circuit_addr(addr) == CircuitAddr(RELAY, R, A)
    assert parse_circuit_addr(f"/ip4/10.0.0.1/tcp/1/p2p/{A}") is None
    assert relay_of(RELAY) == (RELAY, R)


@pytest.mark.parametrize(
    "bad",
    [
        f"/ip4/10.0.0.1/tcp/1/p2p-circuit/p2p/{A}",  # relay without its peer id
        f"{RELAY}/p2p-circuit",  # no destination
        f"{RELAY}/p2p-circuit/p2p/{A}/p2p-circuit/p2p/{B}",  # a chain
        f"{RELAY}/p2p-circuit/p2p/{R}",  # relaying for itself
        f"{RELAY}/p2p-circuit/ip4/1.2.3.4/p2p/{A}",
    ],
)
def test_malformed_circuit_addresses_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_circuit_addr(bad)


def test_relays_are_reached_directly_and_never_relay_for_themselves() -> None:
    with pytest.raises(ValueError):
        relay_of("/ip4/10.0.0.1/tcp/1")
    with pytest.raises(ValueError):
        relay_of(f"{RELAY}/p2p-circuit/p2p/{A}")
    with pytest.raises(ValueError):
        circuit_addr(RELAY, R)


def test_ip_of_reads_ip4_and_ip6_multiaddrs_only() -> None:
    assert ip_of("/ip4/10.77.3.11/tcp/4001") == "10.77.3.11"
    assert ip_of("/ip6/2001:db8::1/tcp/4001/p2p/x") == "2001:db8::1"
    assert ip_of("/dns4/example.org/tcp/1") is None
    assert ip_of("/ip4/300.1.1.1/tcp/1") is None
    assert ip_of("ip4/1.2.3.4") is None


# ---- reachability ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("observed", "local", "verdict"),
    [
        ([], ["192.168.1.2"], "unknown"),
        (["/ip4/10.77.3.11/tcp/53211"], ["192.168.1.2"], "private"),
        (["/ip4/10.77.3.10/tcp/4001"], ["10.77.3.10"], "public"),
        # One peer on our LAN sees our own IP, the internet sees the NAT: private.
        (["/ip4/192.168.1.2/tcp/4001", "/ip4/10.77.3.11/tcp/4001"], ["192.168.1.2"], "private"),
        (["/ip6/2001:db8:0::1/tcp/1"], ["2001:db8::1"], "public"),  # compared as addresses
        (["/dns4/x/tcp/1"], ["10.0.0.1"], "unknown"),
    ],
)
def test_reachability_from_where_peers_see_us(
    observed: list[str], local: list[str], verdict: str
) -> None:
    assert reachability(observed, local) == verdict


# ---- frames and reports ---------------------------------------------------------------------


def test_reserve_frames_round_trip_and_old_reports_still_decode() -> None:
    req = Reserve(5, [RELAY])
    assert decode_parent(encode_frame(req)[4:]) == req
    rep = Reserved(5, [circuit_addr(RELAY, A)], ["relay x: refused"])
    assert decode_host(encode_frame(rep)[4:]) == rep
    stats = PeerStats(
        [PeerReport(A, True, None, None, 0, 0, relayed=True)],
        [A],
        Counters(relayed_connections=1, direct_upgrades_failed=2),
        observed_addrs=["/ip4/10.77.3.11/tcp/1"],
        reachability="private",
        circuit_addrs=[circuit_addr(RELAY, B)],
        reservations=3,
    )
    assert decode_host(encode_frame(stats)[4:]) == stats
    # A report from before NAT traversal (no new fields) decodes with their defaults.
    old = msgspec.msgpack.encode(
        {
            "type": "PeerStats",
            "peers": [[A, True, None, None, 0, 0]],
            "gossip_peers": [],
            "counters": {"published": 1},
        }
    )
    decoded = decode_host(old)
    assert isinstance(decoded, PeerStats)
    assert decoded.reachability == "unknown" and decoded.peers[0].relayed is False
    bad = msgspec.msgpack.encode(
        {"type": "PeerStats", "peers": [], "gossip_peers": [], "counters": {},
         "reachability": "sideways"}
    )  # fmt: skip
    with pytest.raises(ControlError):
        decode_host(bad)


def test_peer_stats_flags_relayed_peers_and_carries_the_nat_report() -> None:
    table = PeerTable()
    table.record_latency(A, 0.01)
    report = peer_stats(
        table,
        [A, B],
        [A],
        HostCounters(relayed_connections=2),
        relayed=[B, "gone"],
        nat=NatReport(["/ip4/1.2.3.4/tcp/5"], "private", [circuit_addr(RELAY, A)], 4),
    )
    flags = {p.peer_id: p.relayed for p in report.peers}
    assert flags == {A: False, B: True}
    assert report.reachability == "private" and report.reservations == 4
    assert report.counters.relayed_connections == 2


def test_the_in_memory_network_has_no_nat() -> None:
    node = MemoryNetwork().node(SecretKey.generate())
    assert node.reachability() == "public" and node.observed_addrs() == []
    assert asyncio.run(node.reserve([RELAY])) == []


# ---- the relay's data pump ------------------------------------------------------------------


@dataclass
class FakeStream:
    """A libp2p stream stand-in: scripted reads, recorded writes, close and reset."""

    chunks: list[bytes] = field(default_factory=list)
    stall: bool = False
    written: list[bytes] = field(default_factory=list)
    closed: bool = False
    reset_: bool = False

    async def read(self, n: int | None = None) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.stall:
            await trio.sleep_forever()
        return b""

    async def write(self, data: bytes) -> None:
        self.written.append(data)

    async def close(self) -> None:
        self.closed = True

    async def reset(self) -> None:
        self.reset_ = True


def _relay() -> Any:
    from psyche.p2p.host.relay import MemberRelay

    host = SimpleNamespace(get_peerstore=lambda: None, get_id=lambda: None)
    return MemberRelay(
        cast(Any, host), DEFAULT_RELAY_LIMITS, lambda p: True, Rejections(logging.getLogger())
    )


def _pump(
    src: FakeStream, dst: FakeStream, *, deadline: float | None = None, budget: int | None = None
) -> list[int] | None:
    relay = _relay()
    limit = None if budget is None else [budget]
    peer = object()  # stands for the libp2p peer id the circuit is filed under
    relay._active_relays[peer] = (src, dst)
    trio.run(relay._relay_data, src, dst, peer, deadline, limit)
    assert peer not in relay._active_relays  # its own entry is forgotten
    return limit


def test_pump_passes_data_and_a_clean_end_on() -> None:
    src, dst = FakeStream([b"ab", b"cd"]), FakeStream()
    left = _pump(src, dst, budget=10)
    assert dst.written == [b"ab", b"cd"] and dst.closed and not dst.reset_ and not src.reset_
    assert left == [6]  # both directions draw on one budget


def test_pump_resets_both_ends_at_the_byte_cap() -> None:
    src, dst = FakeStream([b"abc", b"defg"]), FakeStream()
    _pump(src, dst, budget=5)
    assert dst.written == [b"abc"] and src.reset_ and dst.reset_


def test_pump_resets_both_ends_at_the_deadline_even_when_idle() -> None:
    # The deadline is on time.monotonic()'s clock (as py-libp2p computes it), not trio's.
    src, dst = FakeStream([b"x"], stall=True), FakeStream()
    started = time.monotonic()
    _pump(src, dst, deadline=time.monotonic() + 0.2)
    assert 0.15 < time.monotonic() - started < 5
    assert dst.written == [b"x"] and src.reset_ and dst.reset_


# ---- reservations kept by the host service ---------------------------------------------------

ME = "12D3KooWEcUmKnj6KVHTTZshczWPPxqg8dVyuxifpT5BYoz7ddWM"
R2 = "12D3KooWKrq9SkJQYwbagJ3vrZpSsVxJGV11mCr6kPsQhbFEpyQ1"
RELAY2 = f"/ip4/10.77.3.12/tcp/4001/p2p/{R2}"


class FakeHost:
    """Just what :class:`HostService` touches for reservations."""

    def __init__(self) -> None:
        self.connected: set[str] = set()

    def get_id(self) -> Any:
        from libp2p.peer.id import ID

        return ID.from_base58(ME)

    def get_peerstore(self) -> None:
        return None

    def get_connected_peers(self) -> list[Any]:
        from libp2p.peer.id import ID

        return [ID.from_base58(p) for p in self.connected]

    def get_network(self) -> Any:
        return SimpleNamespace(unblock_peer=lambda pid: None, get_connections=lambda pid: [])


class FakeControl:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, msg: Any) -> None:
        self.sent.append(msg)


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    """The reservations of a HostService on a fake host whose relays accept unless listed in
    ``refuse``."""
    import psyche.p2p.host.reservations as reservations
    import psyche.p2p.host.service as svc
    from psyche.p2p.control import Init
    from psyche.p2p.host.relay import RelayError

    host = FakeHost()
    calls: list[str] = []
    refuse: set[str] = set()

    async def fake_reserve_on(h: Any, relay: Any) -> int:
        peer = relay.peer_id.to_base58()
        calls.append(peer)
        if peer in refuse:
            raise RelayError("relay refused: PERMISSION_DENIED")
        host.connected.add(peer)
        return int(time.time()) + 900

    monkeypatch.setattr(reservations, "reserve_on", fake_reserve_on)
    init = Init(bytes(32), "run", "127.0.0.1", 0, str(tmp_path))
    state = svc.HostService(cast(Any, FakeControl()), init, host, cast(Any, SimpleNamespace()))
    return SimpleNamespace(svc=state.reservations, host=host, calls=calls, refuse=refuse)


def test_reserve_replies_with_circuits_through_the_relays_that_accepted(service: Any) -> None:
    service.refuse.add(R2)
    other_addr = f"/ip4/192.0.2.1/tcp/4001/p2p/{R}"  # a second address of the same relay
    trio.run(service.svc.reserve, Reserve(1, [RELAY, other_addr, RELAY2, "/ip4/1.2.3.4/tcp/1"]))
    reply = service.svc.control.sent[-1]
    assert isinstance(reply, Reserved) and reply.req_id == 1
    assert reply.circuit_addrs == [circuit_addr(RELAY, ME), circuit_addr(other_addr, ME)]
    assert sorted(service.calls) == sorted([R, R2])  # one reservation per relay
    assert any("/ip4/1.2.3.4/tcp/1" in e for e in reply.errors)
    assert any(R2 in e and "PERMISSION_DENIED" in e for e in reply.errors)
    # A new set replaces the old one; [] drops every relay.
    trio.run(service.svc.reserve, Reserve(2, []))
    assert service.svc.control.sent[-1].circuit_addrs == [] and service.svc.relays == {}


def test_reservations_are_renewed_remade_and_retried(service: Any) -> None:
    service.refuse.add(R2)
    trio.run(service.svc.reserve, Reserve(1, [RELAY, RELAY2]))
    service.calls.clear()
    # Nothing is due: the accepted one renews at half its life, the refused one after a pause.
    trio.run(service.svc.relay_tick)
    assert service.calls == []
    # Half-life reached: renewed.
    service.svc.relays[R].next_try = 0.0
    trio.run(service.svc.relay_tick)
    assert service.calls == [R]
    # The relay connection dropped: the relay voided the reservation; remade at once.
    service.calls.clear()
    service.host.connected.discard(R)
    trio.run(service.svc.relay_tick)
    assert service.calls == [R] and service.svc.circuit_addrs() == [circuit_addr(RELAY, ME)]
    # The refused relay is retried once its pause is over, and may accept then.
    service.calls.clear()
    service.refuse.clear()
    service.svc.relays[R2].next_try = 0.0
    trio.run(service.svc.relay_tick)
    assert service.calls == [R2]
    assert service.svc.circuit_addrs() == [circuit_addr(RELAY, ME), circuit_addr(RELAY2, ME)]
