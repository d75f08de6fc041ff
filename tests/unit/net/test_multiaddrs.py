"""Published multiaddrs: what a record may hold, and what a reader turns it into."""

from __future__ import annotations

import pytest

from psyche.net.multiaddrs import (
    AddrError,
    advertised_addrs,
    is_circuit,
    peer_addr,
    record_addr,
)
from psyche.p2p.peer_id import peer_id_for

ME = peer_id_for(bytes(range(32)))
RELAY = peer_id_for(bytes(range(1, 33)))


def test_a_listen_address_is_published_without_our_peer_id_and_read_back_with_it() -> None:
    full = f"/ip4/10.0.0.5/tcp/4001/p2p/{ME}"
    assert record_addr(full, ME) == "/ip4/10.0.0.5/tcp/4001"
    assert peer_addr("/ip4/10.0.0.5/tcp/4001", ME) == full


def test_a_circuit_address_keeps_the_relay_and_appends_the_owner() -> None:
    circuit = f"/ip4/10.0.0.9/tcp/4001/p2p/{RELAY}/p2p-circuit"
    assert record_addr(f"{circuit}/p2p/{ME}", ME) == circuit
    full = peer_addr(circuit, ME)
    assert full == f"{circuit}/p2p/{ME}"
    assert is_circuit(full) and is_circuit(circuit)


@pytest.mark.parametrize(
    "addr",
    [
        f"/ip4/10.0.0.5/tcp/4001/p2p/{RELAY}",  # another peer's id: a record points at its owner
        "/ip4/10.0.0.5/udp/4001",
        "/ip4/10.0.0.5/tcp/0",
        "/ip4/10.0.0.5/tcp/70000",
        "/ip4/0.0.0.0/tcp/4001",
        "/ip4/::1/tcp/4001",
        "/ip6/10.0.0.5/tcp/4001",
        "/ip4/300.1.1.1/tcp/4001",
        "/ip4/10.0.0.5/tcp/4001/p2p-circuit",  # a circuit without a relay id
        f"/ip4/10.0.0.5/tcp/4001/p2p/{ME}/p2p-circuit",  # relaying for itself
        "/ip4/10.0.0.5/tcp/4001 ",
        "/ip4/10.0.0.\u00e95/tcp/4001",
        "",
        "garbage",
    ],
)
def test_shapes_we_do_not_dial_are_refused(addr: str) -> None:
    with pytest.raises(AddrError):
        peer_addr(addr, ME)


def test_record_addr_refuses_another_peers_address() -> None:
    with pytest.raises(AddrError):
        record_addr(f"/ip4/10.0.0.5/tcp/4001/p2p/{RELAY}", ME)


def test_an_unspecified_listener_is_published_at_the_interface_addresses() -> None:
    ips = ["10.1.2.3", "127.0.0.1", "169.254.0.7"]
    got = advertised_addrs(["/ip4/0.0.0.0/tcp/9/p2p/x", "/ip4/10.9.9.9/tcp/8"], ips)
    assert got == ["/ip4/10.1.2.3/tcp/9/p2p/x", "/ip4/10.9.9.9/tcp/8"]
    # Only loopback: that is where it can be reached.
    assert advertised_addrs(["/ip4/0.0.0.0/tcp/9"], ["127.0.0.1"]) == ["/ip4/127.0.0.1/tcp/9"]
    # The real interfaces of this machine: loopback at least.
    assert advertised_addrs(["/ip4/0.0.0.0/tcp/9"])
