"""The emulated internet: reachability through NAT, uplink shaping, teardown, the root gateway."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from psyche.testnet.internet import EmulatedInternet, HostSpec, available, cleanup_stale

_OK, _WHY = available()
pytestmark = pytest.mark.skipif(not _OK, reason=_WHY or "emulated internet unavailable")

PORT = 7000  # each host has its own namespace, so one fixed port is free in all of them

# One small tool for every role a host plays, run with `python probe.py MODE ...`.
PROBE = textwrap.dedent(
    """
    import socket, sys, time
    mode = sys.argv[1]
    if mode == "serve":  # serve N PORT: print each peer's address, then exit
        s = socket.create_server(("0.0.0.0", int(sys.argv[3])))
        print("listening", flush=True)
        for _ in range(int(sys.argv[2])):
            c, peer = s.accept()
            print(peer[0], flush=True)
            c.close()
    elif mode == "connect":  # connect HOST PORT: exit 0 when a connection opens within 1.5 s
        try:
            socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=1.5).close()
            print("ok")
        except OSError as exc:
            print(type(exc).__name__, exc)
            sys.exit(1)
    elif mode == "sink":  # sink PORT: read one connection to EOF, then acknowledge
        s = socket.create_server(("0.0.0.0", int(sys.argv[2])))
        print("listening", flush=True)
        c, _ = s.accept()
        while c.recv(1 << 16):
            pass
        c.sendall(b"k")
        c.close()
    elif mode == "send":  # send HOST PORT NBYTES: print seconds until the sink acknowledged
        c = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=30)
        start = time.monotonic()
        c.sendall(bytes(int(sys.argv[4])))
        c.shutdown(socket.SHUT_WR)
        assert c.recv(1) == b"k"
        print(time.monotonic() - start)
    """
)


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


def _start(net: EmulatedInternet, host: str, probe: Path, *args: str) -> subprocess.Popen[str]:
    """Start a listening probe and wait until it listens."""
    proc = net.run(host, [sys.executable, str(probe), *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "listening"
    return proc


def _probe(net: EmulatedInternet, host: str, probe: Path, *args: str) -> tuple[int, str]:
    proc = net.run(host, [sys.executable, str(probe), *args], stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out.strip()


def _leftovers(prefix: str) -> list[str]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    names = [line.split()[0] for line in netns.stdout.splitlines() if line.strip()]
    names += [line.split(":")[1].strip().split("@")[0] for line in links.stdout.splitlines()]
    return [n for n in names if n.startswith(prefix)]


@pytest.mark.timeout(60)
def test_public_hosts_connect_and_nat_only_lets_connections_out(probe: Path) -> None:
    hosts = [HostSpec("a"), HostSpec("b"), HostSpec("c", nat=True), HostSpec("d", nat=True)]
    with EmulatedInternet(hosts) as net:
        assert net.public_address("c") is None and net.public_address("a") == net.address("a")
        server = _start(net, "a", probe, "serve", "2", str(PORT))
        assert _probe(net, "b", probe, "connect", net.address("a"), str(PORT))[0] == 0
        assert _probe(net, "c", probe, "connect", net.address("a"), str(PORT))[0] == 0
        peers, _ = server.communicate(timeout=10)
        # The public host sees the NAT router's address, never the private one behind it.
        assert peers.split() == [net.address("b"), net.nat_public_address("c")]

        inside = _start(net, "c", probe, "serve", "1", str(PORT))
        private = net.address("c")
        code, why = _probe(net, "a", probe, "connect", private, str(PORT))
        assert code == 1, why
        # Even a peer that routes the private range to the router is dropped by its firewall.
        subprocess.run(
            ["ip", "-n", net.namespace("a"), "route", "add", f"{private.rsplit('.', 1)[0]}.0/24",
             "via", str(net.nat_public_address("c"))],
            check=True,
        )  # fmt: skip
        code, why = _probe(net, "a", probe, "connect", private, str(PORT))
        assert code == 1 and "timed out" in why, why
        # Two NAT'd hosts reach each other neither privately nor through the router's address.
        assert _probe(net, "d", probe, "connect", private, str(PORT))[0] == 1
        nat_c = str(net.nat_public_address("c"))
        assert _probe(net, "d", probe, "connect", nat_c, str(PORT))[0] == 1
        assert inside.poll() is None  # nothing ever got in


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_uplink_and_downlink_shaping_bound_bulk_transfers(probe: Path) -> None:
    size, mbps = 3_000_000, 8.0
    bound_s = size * 8 / (mbps * 1e6)  # 3 s
    hosts = [
        HostSpec("slow-up", uplink_mbps=mbps),
        HostSpec("nat-slow-up", nat=True, uplink_mbps=mbps),
        HostSpec("fast"),
        HostSpec("slow-down", downlink_mbps=mbps),
        HostSpec("sink"),
    ]
    with EmulatedInternet(hosts) as net:

        def transfer(sender: str, receiver: str) -> float:
            sink = _start(net, receiver, probe, "sink", str(PORT))
            code, out = _probe(
                net, sender, probe, "send", net.address(receiver), str(PORT), str(size)
            )
            assert code == 0 and sink.wait(timeout=10) == 0, out
            return float(out)

        shaped = transfer("slow-up", "sink")
        nat_shaped = transfer("nat-slow-up", "sink")
        down_shaped = transfer("fast", "slow-down")
        unshaped = transfer("fast", "sink")
    print(f"\n{size} B at {mbps} Mbit/s (bound {bound_s:.2f} s): uplink {shaped:.2f} s, "
          f"NAT'd uplink {nat_shaped:.2f} s, downlink {down_shaped:.2f} s, "
          f"unshaped {unshaped:.3f} s")  # fmt: skip
    for took in (shaped, nat_shaped, down_shaped):
        # Lower bound: the shaper holds; upper bound generous for a loaded 2-core machine.
        assert 0.8 * bound_s <= took <= 4 * bound_s
    assert unshaped < 0.25 * bound_s


def test_teardown_on_exit_and_on_exception() -> None:
    with EmulatedInternet([HostSpec("a"), HostSpec("b", nat=True)]) as net:
        prefix = net.prefix
        assert len(_leftovers(prefix)) == 5  # core, a, b, b's router, the root gateway link
    assert _leftovers(prefix) == []

    with pytest.raises(RuntimeError, match="boom"), EmulatedInternet([HostSpec("a")]) as net:
        prefix = net.prefix
        net.run("a", ["sleep", "60"])  # a live process must not keep the namespace alive
        raise RuntimeError("boom")
    assert _leftovers(prefix) == []


CHILD = textwrap.dedent(
    """
    import os, sys, time
    from psyche.testnet.internet import EmulatedInternet, HostSpec
    net = EmulatedInternet([HostSpec("a"), HostSpec("b", nat=True)])
    with net:
        print(net.prefix, flush=True)
        if sys.argv[1] == "crash":
            os._exit(0)  # as if killed: no teardown at all
        time.sleep(60)
    """
)

# As a testnet uses it: entered by hand and closed only after its clients were stopped (slow).
CHILD_SLOW_STOP = textwrap.dedent(
    """
    import time
    from psyche.testnet.internet import EmulatedInternet, HostSpec
    net = EmulatedInternet([HostSpec("a"), HostSpec("b", nat=True)])
    net.__enter__()
    print(net.prefix, flush=True)
    try:
        time.sleep(60)
    finally:
        print("stopping", flush=True)
        time.sleep(1.5)  # stopping the clients
        net.close()
    """
)


@pytest.mark.timeout(60)
def test_a_second_sigterm_does_not_abort_the_teardown() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD_SLOW_STOP], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    prefix = proc.stdout.readline().strip()
    assert len(_leftovers(prefix)) == 5
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline().strip() == "stopping"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert _leftovers(prefix) == []


@pytest.mark.timeout(60)
def test_sigterm_tears_down_and_cleanup_stale_removes_a_crashed_run() -> None:
    def child(how: str) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, how], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        return proc, proc.stdout.readline().strip()

    proc, prefix = child("sigterm")
    assert len(_leftovers(prefix)) == 5
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert _leftovers(prefix) == []

    proc, prefix = child("crash")
    assert proc.wait(timeout=20) == 0
    leaked = _leftovers(prefix)
    assert len(leaked) == 5
    assert sorted(cleanup_stale(prefix)) == sorted(leaked)
    assert _leftovers(prefix) == []


@pytest.mark.timeout(60)
def test_root_namespace_server_is_reachable_from_public_and_natted_hosts(probe: Path) -> None:
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(20)
    port = server.getsockname()[1]
    peers: list[str] = []

    def accept(n: int) -> None:
        for _ in range(n):
            conn, peer = server.accept()
            peers.append(peer[0])
            conn.close()

    with (
        server,
        EmulatedInternet([HostSpec("a"), HostSpec("b", nat=True)]) as net,
        EmulatedInternet([HostSpec("a")]) as other,  # a second instance at once must not clash
    ):
        assert other.prefix != net.prefix
        assert other.host_gateway_address() != net.host_gateway_address()
        thread = threading.Thread(target=accept, args=(3,), daemon=True)
        thread.start()
        gateway = net.host_gateway_address()
        assert _probe(net, "a", probe, "connect", gateway, str(port))[0] == 0
        assert _probe(net, "b", probe, "connect", gateway, str(port))[0] == 0
        assert _probe(other, "a", probe, "connect", other.host_gateway_address(), str(port))[0] == 0
        thread.join(timeout=20)
        expected = [net.address("a"), str(net.nat_public_address("b")), other.address("a")]
        assert sorted(peers) == sorted(expected)
