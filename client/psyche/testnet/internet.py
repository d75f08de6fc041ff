"""An emulated internet on one Linux machine, made of network namespaces, for tests and benches.

Topology of one instance (``P`` is its prefix, e.g. ``psytn3fa9``; ``K`` its /24, picked at
random among the ``10.77.K.0/24`` that no route of the root namespace uses yet)::

    root namespace  Pgw 10.77.K.1 ─┐
                                    │            ┌─ eth0 10.77.K.(10+i)         P-h<i>   (public)
                     P-core:  br0 ──┼── h<i> ────┘
                                    │            ┌─ wan 10.77.K.(10+i)  P-nat<i> (NAT router)
                                    └── h<j> ────┘  lan 192.168.(j+1).1 ── eth0 192.168.(j+1).2
                                                                                  P-h<j>  (NAT'd)

* The "internet" is one L2 segment: a Linux bridge in ``P-core``. Everything on it is reachable
  by everything else on it and nothing needs routing, so no host gets a default route (there is
  nowhere beyond it to go) and a bridge is all the core router has to be.
* A public host has its address on that segment. A NAT'd host sits on a private LAN behind its
  own router namespace, which MASQUERADEs out of ``wan`` and, like a home router, forwards from
  ``wan`` to ``lan`` only packets of connections opened from inside (conntrack), so even a peer
  that knows and routes to the private range cannot connect in; other packets arriving on
  ``wan`` are dropped silently (no RST), as most home routers do.
* The root namespace joins the segment through the veth ``Pgw`` at 10.77.K.1, so processes in
  the namespaces reach a server listening on 0.0.0.0 in the root namespace (a local Solana RPC)
  at :meth:`EmulatedInternet.host_gateway_address`, and the root namespace reaches public hosts.
  K differs per instance because that connected route lives in the shared root namespace.
* Nothing reaches beyond the segment: no namespace has a route off it (the root namespace's
  own default route is never used by them), so a test cannot leak traffic to the real network.
* Bandwidth: ``tbf`` on the egress of the host's own interface (uplink) and on the egress of the
  last hop towards it (downlink: the bridge port, or the router's ``lan``).
* Latency is not emulated: this kernel has no ``netem``. The options would be a userspace relay
  that delays each segment, or delays in the application; neither is done here.

Every name an instance makes starts with its prefix (project prefix :data:`PREFIX` plus random
hex), so instances never collide, and :func:`cleanup_stale` removes what a killed run left.
Everything is torn down on exit, on an exception and on SIGTERM (turned into ``SystemExit``).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

__all__ = [
    "PREFIX",
    "EmulatedInternet",
    "HostSpec",
    "InternetOptions",
    "NetError",
    "available",
    "cleanup_stale",
]

# Every namespace and root-namespace link of every instance starts with this, so stale ones can
# be told apart from anything else on the machine.
PREFIX = "psytn"
_CORE_NET = "10.77"
_MAX_HOSTS = 200
_LOCK_PATH = (
    "/run/lock/psyche-testnet-internet.lock"
    if os.path.isdir("/run/lock")
    else ("/tmp/psyche-testnet-internet.lock")
)
# A bound on how long a process started with run() gets to exit after SIGTERM at teardown.
_STOP_GRACE_S = 2.0


class NetError(RuntimeError):
    """A command building or tearing down the emulated internet failed."""


@dataclass(frozen=True)
class HostSpec:
    """One host: behind its own NAT or public, and its access link's rates (None: unshaped)."""

    name: str
    nat: bool = False
    uplink_mbps: float | None = None
    downlink_mbps: float | None = None


@dataclass(frozen=True)
class InternetOptions:
    """A testnet's clients on an emulated internet (``--emulate-internet``): client N is host
    ``client-N``, NAT'd when N is in ``nat_clients``, with these access-link rates."""

    nat_clients: tuple[int, ...] = ()
    uplink_mbps: float | None = None
    downlink_mbps: float | None = None

    def hosts(self, num_clients: int) -> list[HostSpec]:
        bad = [n for n in self.nat_clients if not 1 <= n <= num_clients]
        if bad:
            raise ValueError(f"--nat-clients {bad}: clients are numbered 1..{num_clients}")
        return [
            HostSpec(
                f"client-{n}",
                nat=n in self.nat_clients,
                uplink_mbps=self.uplink_mbps,
                downlink_mbps=self.downlink_mbps,
            )
            for n in range(1, num_clients + 1)
        ]


def _cmd(*argv: str, check: bool = True) -> str:
    """Run a command, returning stdout; on failure raise NetError naming it with its stderr."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise NetError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _ns(ns: str, *argv: str) -> str:
    return _cmd("ip", "netns", "exec", ns, *argv)


def available() -> tuple[bool, str]:
    """Whether namespaces can be made here, and why not when they cannot."""
    if os.geteuid() != 0:
        return False, "emulated internet needs root (network namespaces)"
    for tool in ("ip", "tc", "iptables"):
        if shutil.which(tool) is None:
            return False, f"emulated internet needs `{tool}` on PATH"
    probe = f"{PREFIX}probe{secrets.token_hex(3)}"
    try:
        _cmd("ip", "netns", "add", probe)
    except (NetError, OSError) as exc:
        return False, f"cannot create a network namespace: {exc}"
    try:
        # NAT needs the nat table inside a namespace; some kernels lack it.
        _ns(probe, "iptables", "-t", "nat", "-L", "-n")
    except NetError as exc:
        return False, f"iptables nat table unusable in a namespace: {exc}"
    finally:
        _cmd("ip", "netns", "del", probe, check=False)
    return True, ""


def _list_namespaces() -> list[str]:
    # Lines look like "name (id: 3)" or just "name".
    return [line.split()[0] for line in _cmd("ip", "netns", "list").splitlines() if line.strip()]


def _root_links() -> list[str]:
    # "5: name@if3: <...>" -> "name"
    names = []
    for line in _cmd("ip", "-o", "link", "show").splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def _kill_namespace_processes(ns: str) -> None:
    """SIGKILL what still runs in a namespace: while anything does, deleting it frees nothing."""
    for pid in _cmd("ip", "netns", "pids", ns, check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _remove(namespaces: Sequence[str], links: Sequence[str]) -> None:
    # Root links first: a namespace is destroyed asynchronously, so the root end of a veth into
    # it can outlive `ip netns del` for a while; deleting it ourselves makes removal immediate.
    for link in links:
        _cmd("ip", "link", "del", link, check=False)
    for ns in namespaces:
        _kill_namespace_processes(ns)
        _cmd("ip", "netns", "del", ns, check=False)


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Remove the namespaces and root-namespace links whose names start with ``prefix``.

    With the default prefix this also removes live instances of other runs on this machine: use
    it at the start of a session, or with one instance's prefix. Returns what it removed.
    """
    if not prefix.startswith(PREFIX):
        raise ValueError(f"refusing to clean up names outside the project prefix {PREFIX!r}")
    namespaces = [ns for ns in _list_namespaces() if ns.startswith(prefix)]
    links = [link for link in _root_links() if link.startswith(prefix)]
    _remove(namespaces, links)
    return namespaces + links


def _free_subnet() -> int:
    """A K such that no root-namespace route is inside or around 10.77.K.0/24."""
    used = []
    for line in _cmd("ip", "-4", "route", "show", "table", "all").splitlines():
        # "10.1.0.0/16 dev x", or with a type first: "local 10.77.3.1 dev y table local".
        words = [w for w in line.split() if w[:1].isdigit()]
        with contextlib.suppress(ValueError):
            if words:
                used.append(ipaddress.ip_network(words[0], strict=False))
    candidates = list(range(1, 255))
    secrets.SystemRandom().shuffle(candidates)
    for k in candidates:
        net = ipaddress.ip_network(f"{_CORE_NET}.{k}.0/24")
        if not any(net.overlaps(u) and u.prefixlen >= 16 for u in used):
            # A broader route (e.g. 10.0.0.0/8 via eth0) is fine: the connected /24 wins.
            return k
    raise NetError(f"no free /24 left in {_CORE_NET}.0.0/16")


def _tbf(ns: str, dev: str, mbps: float) -> None:
    rate_bytes = mbps * 1e6 / 8
    # Burst: at least 10 ms of traffic (tbf needs rate/HZ) and a few full-size frames; a queue
    # of 100 ms like a modest modem buffer, so TCP sees losses and backs off as on a real link.
    burst = max(int(rate_bytes / 100), 16 * 1514)
    _ns(ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
        "rate", f"{int(mbps * 1000)}kbit", "burst", str(burst), "latency", "100ms")  # fmt: skip


class EmulatedInternet:
    """Context manager building the topology in the module docstring for ``hosts``."""

    def __init__(self, hosts: Sequence[HostSpec]) -> None:
        names = [h.name for h in hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"host names must be unique: {names}")
        if len(hosts) > _MAX_HOSTS:
            raise ValueError(f"at most {_MAX_HOSTS} hosts")
        self.hosts = list(hosts)
        self.prefix = f"{PREFIX}{secrets.token_hex(2)}"
        self._k = 0
        self._namespaces: list[str] = []
        self._links: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._index = {h.name: i for i, h in enumerate(hosts)}
        self._prev_sigterm: Any = None
        self._sigterm_installed = False
        self._terminating = False
        self._closed = True

    # -- addresses -------------------------------------------------------------------------------

    def _spec(self, name: str) -> HostSpec:
        if name not in self._index:
            raise KeyError(f"no host {name!r}; hosts: {list(self._index)}")
        return self.hosts[self._index[name]]

    def _core_addr(self, i: int) -> str:
        return f"{_CORE_NET}.{self._k}.{10 + i}"

    def namespace(self, name: str) -> str:
        """The network namespace the host's processes run in."""
        self._spec(name)
        return f"{self.prefix}-h{self._index[name]}"

    def nat_namespace(self, name: str) -> str | None:
        """The namespace of a NAT'd host's router (None for a public host)."""
        i = self._index[name]
        return f"{self.prefix}-nat{i}" if self._spec(name).nat else None

    def address(self, name: str) -> str:
        """The host's own address: on the internet if public, on its private LAN if NAT'd."""
        i = self._index[name]
        return f"192.168.{i + 1}.2" if self._spec(name).nat else self._core_addr(i)

    def public_address(self, name: str) -> str | None:
        """The host's address on the internet, or None when NAT'd (no way in)."""
        return None if self._spec(name).nat else self._core_addr(self._index[name])

    def nat_public_address(self, name: str) -> str | None:
        """The address a NAT'd host's outbound connections come from (its router's)."""
        return self._core_addr(self._index[name]) if self._spec(name).nat else None

    def host_gateway_address(self) -> str:
        """Where processes in the namespaces reach the root namespace (servers on 0.0.0.0)."""
        return f"{_CORE_NET}.{self._k}.1"

    # -- processes -------------------------------------------------------------------------------

    def run(self, name: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the host's namespace; it is stopped at teardown if still alive."""
        if self._closed:
            raise RuntimeError("EmulatedInternet is not entered")
        proc: subprocess.Popen[Any] = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace(name), *argv], **popen_kwargs
        )
        self._procs.append(proc)
        return proc

    # -- building --------------------------------------------------------------------------------

    def _add_ns(self, ns: str) -> None:
        _cmd("ip", "netns", "add", ns)
        self._namespaces.append(ns)
        _cmd("ip", "-n", ns, "link", "set", "lo", "up")

    def _build(self) -> None:
        # Choosing a free prefix and /24 and claiming them is one step under a machine-wide lock,
        # so two instances starting at once (other processes too) cannot pick the same ones.
        with open(_LOCK_PATH, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            existing = _list_namespaces() + _root_links()
            while any(n.startswith(self.prefix) for n in existing):
                self.prefix = f"{PREFIX}{secrets.token_hex(2)}"
            self._k = _free_subnet()
            core, net = f"{self.prefix}-core", f"{_CORE_NET}.{self._k}"
            self._add_ns(core)
            gw = f"{self.prefix}gw"
            _cmd("ip", "link", "add", gw, "type", "veth", "peer", "name", "root", "netns", core)
            self._links.append(gw)
            _cmd("ip", "addr", "add", f"{net}.1/24", "dev", gw)
        _cmd("ip", "link", "set", gw, "up")
        _cmd("ip", "-n", core, "link", "add", "br0", "type", "bridge")
        _cmd("ip", "-n", core, "link", "set", "br0", "up")
        _cmd("ip", "-n", core, "link", "set", "root", "master", "br0", "up")
        for i, spec in enumerate(self.hosts):
            host = f"{self.prefix}-h{i}"
            self._add_ns(host)
            if not spec.nat:
                self._access_link(core, f"h{i}", host, "eth0", f"{net}.{10 + i}/24")
                down_ns, down_dev = core, f"h{i}"
            else:
                router = f"{self.prefix}-nat{i}"
                self._add_ns(router)
                self._access_link(core, f"h{i}", router, "wan", f"{net}.{10 + i}/24")
                lan = f"192.168.{i + 1}"
                _cmd("ip", "link", "add", "lan", "netns", router, "type", "veth",
                     "peer", "name", "eth0", "netns", host)  # fmt: skip
                _cmd("ip", "-n", router, "addr", "add", f"{lan}.1/24", "dev", "lan")
                _cmd("ip", "-n", router, "link", "set", "lan", "up")
                _cmd("ip", "-n", host, "addr", "add", f"{lan}.2/24", "dev", "eth0")
                _cmd("ip", "-n", host, "link", "set", "eth0", "up")
                _cmd("ip", "-n", host, "route", "add", "default", "via", f"{lan}.1")
                self._nat(router)
                down_ns, down_dev = router, "lan"
            if spec.uplink_mbps is not None:
                _tbf(host, "eth0", spec.uplink_mbps)
            if spec.downlink_mbps is not None:
                _tbf(down_ns, down_dev, spec.downlink_mbps)

    def _access_link(self, core: str, port: str, ns: str, dev: str, cidr: str) -> None:
        _cmd("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", port,
             "netns", core)  # fmt: skip
        _cmd("ip", "-n", core, "link", "set", port, "master", "br0", "up")
        _cmd("ip", "-n", ns, "addr", "add", cidr, "dev", dev)
        _cmd("ip", "-n", ns, "link", "set", dev, "up")

    @staticmethod
    def _nat(router: str) -> None:
        _ns(router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        _ns(router, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "wan", "-j", "MASQUERADE")
        # Inbound only as replies: what makes a home router unreachable from outside even for a
        # peer that routes the private range to it.
        _ns(router, "iptables", "-A", "FORWARD", "-i", "wan", "-o", "lan", "-m", "conntrack",
            "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")  # fmt: skip
        _ns(router, "iptables", "-A", "FORWARD", "-i", "wan", "-j", "DROP")
        # Unsolicited packets to the router itself are dropped, not answered with a RST, as most
        # home routers do ("stealth"). This matters for hole punching: the peer's SYN often
        # reaches our router before our own SYN has made the mapping; a RST would kill that
        # connection attempt, a silent drop lets its retransmission complete the simultaneous
        # open (docs/p2p-nat.md, measured both ways).
        _ns(router, "iptables", "-A", "INPUT", "-i", "wan", "-m", "conntrack",
            "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")  # fmt: skip
        _ns(router, "iptables", "-A", "INPUT", "-i", "wan", "-j", "DROP")

    # -- lifecycle -------------------------------------------------------------------------------

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # Unwind through __exit__ (and the caller's finally blocks) instead of dying in place.
        # Only once: a second SIGTERM (`timeout` and a process group both signalling, an
        # impatient operator) would otherwise abort the teardown the first one started, and
        # leave every namespace behind.
        if self._terminating:
            return
        self._terminating = True
        raise SystemExit(128 + signum)

    def __enter__(self) -> EmulatedInternet:
        self._closed = False
        if threading.current_thread() is threading.main_thread():
            self._prev_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._sigterm_installed = True
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the processes started with run() and remove every namespace and link made."""
        if self._closed:
            return
        self._closed = True
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + _STOP_GRACE_S
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        _remove(self._namespaces, self._links)
        leftovers = [n for n in _list_namespaces() if n.startswith(self.prefix)]
        self._namespaces, self._links, self._procs = [], [], []
        if self._sigterm_installed:
            self._sigterm_installed = False
            # A previous handler set outside Python reads as None: fall back to the default.
            with contextlib.suppress(ValueError):  # ValueError: closed from another thread
                signal.signal(signal.SIGTERM, self._prev_sigterm or signal.SIG_DFL)
        if leftovers:
            raise NetError(f"namespaces left after teardown: {leftovers}")
