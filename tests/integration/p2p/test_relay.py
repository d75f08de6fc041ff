"""NAT traversal in the emulated internet: circuit relay v2 through a reachable member, and what
DCUtR hole punching makes of it behind Linux MASQUERADE NATs (docs/p2p-nat.md).

Hosts: ``r`` public (the relay), ``a`` and ``b`` each behind its own NAT, ``m`` behind a NAT and
not a member. Each node runs in its host's namespace as ``relay_driver.py`` (which starts its
own libp2p host child there; ``PSYCHE_RELAY_TEST_LOG=INFO`` shows the relay and DCUtR steps).
The relay runs another run id than ``a`` and ``b``, so it is not
in their gossip mesh: an announcement from ``a`` that reaches ``b`` crossed the connection
between them, which starts relayed.

What DCUtR achieves depends on timing (both NATs must see each other's SYN as the reply to
their own), so the test asserts only that an attempt was made and that whatever it did, the
two members stay connected and keep exchanging gossip; the outcome is printed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from psyche.protocol.identity import SecretKey
from psyche.testnet.internet import EmulatedInternet, HostSpec, available

from .harness import JsonLinesNode
from .node_runner import seeded_blob

_OK, _WHY = available()
pytestmark = [
    pytest.mark.skipif(not _OK, reason=_WHY or "emulated internet unavailable"),
    pytest.mark.slow,
]

DRIVER = Path(__file__).with_name("relay_driver.py")
PORT = 4001  # one fixed port works in every namespace; DCUtR dials from it
STARTUP_TIMEOUT = 120.0  # py-libp2p imports take seconds on a loaded 2-core machine
MIB = 1 << 20


class Node(JsonLinesNode):
    """One ``relay_driver.py`` in a host's namespace, driven over JSON lines."""

    def __init__(self, net: EmulatedInternet, host: str, run_id: str) -> None:
        self.host = host
        proc: subprocess.Popen[bytes] = net.run(
            host,
            [
                sys.executable,
                str(DRIVER),
                "--run-id",
                run_id,
                "--key-hex",
                SecretKey.generate().to_bytes().hex(),
                "--listen-host",
                net.address(host),
                "--port",
                str(PORT),
                "--log-level",
                os.environ.get("PSYCHE_RELAY_TEST_LOG", "WARNING"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        super().__init__(host, proc)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        super().wait_ready(timeout)

    def until(
        self, what: str, pred: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any]:
        """Poll ``nat`` until ``pred`` holds (the host reports about once a second)."""
        deadline = time.monotonic() + timeout
        while True:
            nat = self.call("nat")
            if pred(nat):
                return nat
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.host}: {what} within {timeout:g} s; last: {nat}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b'{"op": "stop"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[EmulatedInternet, dict[str, Node]]]:
    hosts = [
        HostSpec("r"),
        HostSpec("a", nat=True),
        HostSpec("b", nat=True),
        HostSpec("m", nat=True),
    ]
    with EmulatedInternet(hosts) as net:
        nodes = {
            "r": Node(net, "r", "relay-only"),
            **{h: Node(net, h, "nat-run") for h in "abm"},
        }
        try:
            for node in nodes.values():
                node.wait_ready()
            r, a, b, m = (nodes[h] for h in "rabm")
            r.call("allow", peers=[a.peer_id, b.peer_id])  # m is no member
            a.call("allow", peers=[r.peer_id, b.peer_id])
            b.call("allow", peers=[r.peer_id, a.peer_id])
            m.call("allow", peers=[r.peer_id, a.peer_id, b.peer_id])
            for node in (a, b, m):
                assert node.call("connect", addrs=r.addrs)["errors"] == []
            yield net, nodes
        finally:
            for node in nodes.values():
                node.stop()


def _relay_circuit(relay: Node, peer: Node) -> str:
    return f"{relay.addrs[0]}/p2p-circuit/p2p/{peer.peer_id}"


@pytest.mark.timeout(300)
def test_nat_members_reach_each_other_through_a_relay_and_punch_holes(
    world: tuple[EmulatedInternet, dict[str, Node]],
) -> None:
    net, nodes = world
    r, a, b = nodes["r"], nodes["a"], nodes["b"]

    # NAT detection: the relay sees a and b at their routers' addresses, they see r as it is.
    nat_a = a.until("private", lambda n: n["reachability"] == "private", 30)
    assert any(f"/ip4/{net.nat_public_address('a')}/" in o for o in nat_a["observed"])
    b.until("private", lambda n: n["reachability"] == "private", 30)
    r.until("public", lambda n: n["reachability"] == "public", 30)

    # a's own addresses are private: b cannot dial them.
    assert a.addrs[0].startswith(f"/ip4/{net.address('a')}/")
    assert b.call("connect", addrs=a.addrs, wait=60)["errors"]

    # Reservations on r give circuit addresses, which b dials.
    circuits = a.call("reserve", relays=r.addrs)["circuits"]
    assert circuits == [_relay_circuit(r, a)]
    assert b.call("reserve", relays=r.addrs)["circuits"] == [_relay_circuit(r, b)]
    t0 = time.monotonic()
    assert b.call("connect", addrs=circuits, wait=60)["errors"] == []
    connect_s = time.monotonic() - t0
    first = b.until(
        "connected to a", lambda n: n["peers"].get(a.peer_id, {}).get("connected", False), 10
    )["peers"][a.peer_id]

    # Gossip crosses the a–b connection (r is in another run's mesh).
    b.call("wait_peers", n=1, timeout=30.0, wait=40)
    sent = a.call("announce", step=7)["sent_at"]
    got = b.wait_event(
        lambda e: e.get("event") == "announcement" and e.get("from") == a.peer_id, 30
    )
    assert got["kind"] == "TrainingResult" and got["step"] == 7

    # A blob of a few MB, served by a, fetched by b, verified.
    size = 3 * MIB
    blob = a.call("serve", seed=5, size=size)["hash"]
    fetched = b.call("fetch", hash=blob, peers=[a.peer_id], max_size=size, timeout=90.0, wait=100)
    assert fetched["ok"], fetched
    assert fetched["sha256"] == blob == hashlib.sha256(seeded_blob(5, size)).hexdigest()
    during = b.call("nat")["peers"][a.peer_id]

    # DCUtR: auto-driven on both sides for relayed peers. Wait until one attempt is counted.
    def attempts(n: dict[str, Any]) -> int:
        c = n["counters"]
        return int(c["direct_upgrades_ok"] + c["direct_upgrades_failed"])

    deadline = time.monotonic() + 60
    while attempts(a.call("nat")) + attempts(b.call("nat")) == 0:
        assert time.monotonic() < deadline, "no hole punch attempt within 60 s"
        time.sleep(1)
    time.sleep(5)  # let a running round finish
    na, nb = a.call("nat"), b.call("nat")
    after = nb["peers"][a.peer_id]
    assert after["connected"], "a failed or successful punch must not cut a and b apart"

    # Whatever DCUtR did, a and b still exchange gossip.
    a.call("announce", step=8)
    b.wait_event(lambda e: e.get("event") == "announcement" and e.get("step") == 8, 30)

    relayed = nb["counters"]["relayed_connections"] + na["counters"]["relayed_connections"]
    assert relayed >= 2  # b's dial and a's accept
    assert r.call("nat")["counters"]["circuits_relayed"] >= 1
    print(
        f"\nrelayed connect {connect_s:.2f} s; relayed at first report: {first['relayed']}; "
        f"gossip {got['at'] - sent:.3f} s; {size // MIB} MiB blob in {fetched['elapsed']:.2f} s "
        f"(relayed during fetch: {during['relayed']}); after DCUtR: relayed={after['relayed']}; "
        f"a: ok={na['counters']['direct_upgrades_ok']} "
        f"failed={na['counters']['direct_upgrades_failed']}, "
        f"b: ok={nb['counters']['direct_upgrades_ok']} "
        f"failed={nb['counters']['direct_upgrades_failed']}"
    )


@pytest.mark.timeout(120)
def test_a_non_member_can_neither_reserve_nor_be_relayed(
    world: tuple[EmulatedInternet, dict[str, Node]],
) -> None:
    _, nodes = world
    r, a, m = nodes["r"], nodes["a"], nodes["m"]
    before = r.call("nat")["counters"]
    assert m.call("reserve", relays=r.addrs)["circuits"] == []
    # m may not use r to reach a member either (a holds a reservation on r by now, or not:
    # either way r refuses m).
    assert m.call("connect", addrs=[_relay_circuit(r, a)], wait=60)["errors"]
    after = r.until(
        "refusals counted",
        lambda n: n["counters"]["relay_refusals"] >= before["relay_refusals"] + 2,
        15,
    )
    assert after["counters"]["rejections"].get("relay_not_member", 0) >= 2
    peers_of_a = a.call("nat")["peers"]
    assert m.peer_id not in peers_of_a or not peers_of_a[m.peer_id]["connected"]


def _punch_trial(routers_drop: bool, wait_s: float) -> dict[str, Any]:
    """A fresh internet (relay ``r``, NAT'd ``a`` and ``b``), ``b`` dials ``a`` through ``r``;
    wait until DCUtR made the connection direct or ``wait_s`` passed, then check that gossip
    still flows. ``routers_drop``: the NAT routers drop unsolicited packets to themselves (as
    emulated, like most home routers); False: they answer a SYN with a RST (the kernel's
    default without the drop rule)."""
    hosts = [HostSpec("r"), HostSpec("a", nat=True), HostSpec("b", nat=True)]
    with EmulatedInternet(hosts) as net:
        if not routers_drop:
            # The emulated routers drop unsolicited inbound; without that rule their kernel
            # answers a SYN to a port with no mapping with a RST.
            for h in "ab":
                router = net.nat_namespace(h)
                assert router is not None
                undrop = ["iptables", "-D", "INPUT", "-i", "wan", "-j", "DROP"]
                subprocess.run(["ip", "netns", "exec", router, *undrop], check=True)
        nodes = {"r": Node(net, "r", "relay-only"), **{h: Node(net, h, "nat-run") for h in "ab"}}
        try:
            for node in nodes.values():
                node.wait_ready()
            r, a, b = (nodes[h] for h in "rab")
            r.call("allow", peers=[a.peer_id, b.peer_id])
            a.call("allow", peers=[r.peer_id, b.peer_id])
            b.call("allow", peers=[r.peer_id, a.peer_id])
            for node in (a, b):
                assert node.call("connect", addrs=r.addrs)["errors"] == []
            circuits = a.call("reserve", relays=r.addrs)["circuits"]
            t0 = time.monotonic()
            assert b.call("connect", addrs=circuits, wait=60)["errors"] == []
            took: float | None = None
            deadline = t0 + wait_s
            while time.monotonic() < deadline:
                peer = b.call("nat")["peers"].get(a.peer_id, {})
                if peer.get("connected") and not peer.get("relayed", True):
                    took = time.monotonic() - t0
                    break
                time.sleep(0.5)
            time.sleep(2)  # let the other side's session finish counting
            na, nb = a.call("nat"), b.call("nat")
            assert nb["peers"][a.peer_id]["connected"]
            step = int(t0) % 1000
            a.call("announce", step=step)
            b.wait_event(lambda e: e.get("event") == "announcement" and e.get("step") == step, 30)
            return {
                "direct_after_s": took,
                "a": {
                    k: na["counters"][k] for k in ("direct_upgrades_ok", "direct_upgrades_failed")
                },
                "b": {
                    k: nb["counters"][k] for k in ("direct_upgrades_ok", "direct_upgrades_failed")
                },
            }
        finally:
            for node in nodes.values():
                node.stop()


@pytest.mark.timeout(300)
def test_hole_punching_when_nat_routers_drop_unsolicited_syns() -> None:
    """The emulated routers drop a SYN for a port they have no mapping for, as many home routers
    do (the kernel's default would be a RST). With DROP, DCUtR's simultaneous open
    went direct in every measured trial (docs/p2p-nat.md); asserted here: the members stay
    connected and gossip flows whatever it did, and an attempt was made."""
    result = _punch_trial(routers_drop=True, wait_s=60)
    print(f"\nrouters dropping unsolicited SYNs: {result}")
    attempts = sum(
        result[s]["direct_upgrades_ok"] + result[s]["direct_upgrades_failed"] for s in "ab"
    )
    assert attempts >= 1


@pytest.mark.skipif(
    not os.environ.get("PSYCHE_RELAY_PUNCH_TRIALS"),
    reason="a measurement for docs/p2p-nat.md: set PSYCHE_RELAY_PUNCH_TRIALS=N",
)
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("routers", ["reset", "drop"])
def test_measure_hole_punching(routers: str) -> None:
    trials = int(os.environ.get("PSYCHE_RELAY_PUNCH_TRIALS", "0"))
    results = [_punch_trial(routers == "drop", wait_s=110) for _ in range(trials)]
    times = [r["direct_after_s"] for r in results]
    direct = [t for t in times if t is not None]
    print(f"\nrouters {routers}: direct in {len(direct)}/{trials}; seconds: {times}")
    for r in results:
        print(f"  {r}")
