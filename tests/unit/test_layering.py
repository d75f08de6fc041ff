"""Imports between psyche's subpackages, and between the modules of one, point one way.

Every module under ``client/psyche`` is parsed (not imported), and every ``import`` in it counts:
top-level ones, those inside functions and those under ``if TYPE_CHECKING:``. A lazy import hides a
dependency from the interpreter, not from the architecture. Each import is mapped to the
subpackage it names (``psyche.backends.solana.backend`` → ``backends``; top-level modules such as
``psyche.events`` are their own unit) and checked against :data:`ALLOWED`; the subpackage graph
must also have no cycle. Inside each subpackage the module graph must have no cycle either (issue
42: ``daemon.rounds`` ↔ ``daemon.verifying`` and ``distro.dct`` ↔ ``distro.sign_bound`` were
circles, closed by a type-checking and a lazy import); an import names the module it imports from
(``from psyche.distro import Payload`` names the package's ``__init__``), not the parents the
interpreter loads on the way. Only the libp2p host's package (:data:`HOST_PROCESS`) imports trio or
libp2p. Run ``python tests/unit/test_layering.py`` to print the real graph.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "client" / "psyche"

PROTOCOL_CORE = {"protocol", "coordinator"}
EVERYTHING = {
    "psyche", "protocol", "coordinator", "events", "net", "p2p", "distro", "training", "data",
    "checkpoint", "backends", "daemon", "simulation", "testnet", "localsvm", "metrics",
    "evals", "explorer", "solana",
}  # fmt: skip

# What each unit may import (a unit never needs itself listed). An entry is a subpackage, or a
# dotted module prefix when only part of a subpackage is open to the importer.
ALLOWED: dict[str, set[str]] = {
    # The package root only carries the version.
    "psyche": set(),
    # Byte-exact primitives and run-config types: the shared base, so it depends on nothing.
    "protocol": set(),
    # The pure state machine, mirrored by the Rust program: no I/O, only the protocol's types.
    "coordinator": {"protocol"},
    # The structured event log records coordinator states; nothing below it writes events.
    "events": PROTOCOL_CORE,
    # Framing and connections shared by every network transport: they know no run.
    "net": {"protocol"},
    # Peer-to-peer gossip and blobs carry protocol messages over net.
    "p2p": {"protocol", "net"},
    # The optimizer works on the run config alone.
    "distro": {"protocol"},
    # Token sources read files or fetch them over net.
    "data": {"protocol", "net"},
    # The trainer drives the DisTrO optimizer.
    "training": {"protocol", "distro"},
    # Metrics sinks read the event records; optimizer statistics read a trainer's model and DisTrO.
    "metrics": {"events", "protocol", "distro", "training"},
    # Evals score a model (training) on tasks read from files or the local Hub cache.
    "evals": {"protocol", "training"},
    # Checkpoints are models (training) saved locally or fetched from peers.
    "checkpoint": {"protocol", "p2p", "net", "training"},
    # A local Solana validator stand-in: it must not know what psyche runs on it.
    "localsvm": set(),
    # The Solana chain client (IDL codec, account records, RPC, sessions, each program's
    # commands): it reads and writes the programs' accounts for the backend, the CLI, the
    # testnets and the explorer, and knows no Backend seam (it raises its own ChainError).
    "solana": PROTOCOL_CORE,
    # Coordinator transports: they host (centralized) or reach the coordinator, serve data and
    # name peers, and log events; they never reach up into the daemon that drives them.
    "backends": PROTOCOL_CORE | {"events", "data", "p2p", "net", "solana"},
    # The client's logic talks to its coordinator only through the Backend seam; which backend
    # it gets is decided where the process is assembled (cli).
    "daemon": PROTOCOL_CORE
    | {"events", "p2p", "net", "distro", "training", "data", "checkpoint", "backends.base"}
    | {"evals", "metrics"},
    # Many clients in one process: it assembles daemons and a coordinator host in memory, as cli
    # assembles one process.
    "simulation": EVERYTHING - {"cli", "testnet", "localsvm"},
    # The local testnet starts processes and prepares their chain, data and models.
    "testnet": PROTOCOL_CORE | {"events", "p2p", "net", "data", "training", "solana"},
    # The run explorer reads runs as a client would (the coordinator's decoders, the chain
    # client's layouts and RPC) and knows nothing of training, the daemon or the testnets.
    "explorer": PROTOCOL_CORE | {"events", "solana"},
    # Processes are assembled here, from everything; nothing imports cli.
    "cli": EVERYTHING,
}

# The libp2p host runs in its own process (docs/p2p-nat.md, "The libp2p host process"): in
# the asyncio daemon, whose training thread holds the GIL, the trio host starved, and importing
# libp2p takes seconds. So only its package imports trio or libp2p, and nothing else imports the
# package, which would bring them in; the parent starts it by name (python -m psyche.p2p.host).
HOST_PROCESS = "psyche.p2p.host"
HOST_ONLY = {"trio", "libp2p", HOST_PROCESS}

# Known edges that break the table, in files whose owner has not moved them yet. Each entry is
# (importing module, imported module); remove an entry once the import is gone.
PENDING: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    base = ROOT.parent.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path) -> Iterator[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), package)


def imports_in(source: str, package: str) -> Iterator[str]:
    """Every module the code imports, wherever the import statement is (``package`` resolves
    relative imports)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                yield sub if is_module(sub) else module


def unit_of(dotted: str) -> str | None:
    """``psyche.backends.solana.backend`` → ``backends``; not psyche → None."""
    parts = dotted.split(".")
    if parts[0] != "psyche":
        return None
    return parts[1] if len(parts) > 1 else "psyche"


def module_pairs() -> set[tuple[str, str]]:
    """(importing module, imported module) pairs of psyche modules, a module's own name aside."""
    out = set()
    for path in sorted(ROOT.rglob("*.py")):
        src = module_name(path)
        out.update((src, dst) for dst in imports_of(path) if unit_of(dst) and dst != src)
    return out


def edges() -> set[tuple[str, str]]:
    """(importing module, imported module) pairs between different units."""
    return {(src, dst) for src, dst in module_pairs() if unit_of(src) != unit_of(dst)}


def module_cycles(pairs: set[tuple[str, str]]) -> list[list[str]]:
    """The module cycles among ``pairs`` that stay inside one unit (one per module on a cycle);
    a cycle through two units is the unit graph's to report."""
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in pairs:
        if unit_of(src) == unit_of(dst):
            graph[src].add(dst)
    return cycles(graph)


def allowed(src: str, dst: str) -> bool:
    rel = dst.split(".", 1)[1] if "." in dst else dst
    unit = unit_of(src)
    assert unit is not None
    return any(rel == a or rel.startswith(a + ".") for a in ALLOWED[unit])


def host_only(src: str, dst: str) -> bool:
    """Whether ``src`` importing ``dst`` breaks the host process rule (:data:`HOST_ONLY`)."""
    if src == HOST_PROCESS or src.startswith(HOST_PROCESS + "."):
        return False
    return any(dst == m or dst.startswith(m + ".") for m in HOST_ONLY)


def unit_graph(pairs: set[tuple[str, str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in pairs:
        a, b = unit_of(src), unit_of(dst)
        assert a is not None and b is not None
        graph[a].add(b)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each unit that lies on one (depth-first search)."""
    found: list[list[str]] = []
    on_cycle: set[str] = set()
    for start in sorted(graph):
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    if not on_cycle & set(trail):
                        found.append([*trail, start])
                        on_cycle.update(trail)
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    return found


def test_every_unit_has_a_row() -> None:
    units = {unit_of(module_name(p)) for p in ROOT.rglob("*.py")}
    missing = units - set(ALLOWED)
    assert not missing, f"classify the new subpackage(s) in ALLOWED: {sorted(missing)}"


def test_imports_follow_the_allowed_table() -> None:
    pairs = edges()
    bad = sorted(p for p in pairs - PENDING if not allowed(*p))
    assert not bad, "imports outside ALLOWED:\n" + "\n".join(f"  {s} -> {d}" for s, d in bad)


def test_only_the_host_process_imports_trio_or_libp2p() -> None:
    bad = sorted(
        (module_name(path), dst)
        for path in ROOT.rglob("*.py")
        for dst in imports_of(path)
        if host_only(module_name(path), dst)
    )
    assert not bad, f"only {HOST_PROCESS} (the libp2p child process) imports these:\n" + "\n".join(
        f"  {s} -> {d}" for s, d in bad
    )


def test_pending_exceptions_still_exist() -> None:
    # A fixed edge must leave PENDING, or the exception would silently cover a new import.
    gone = sorted(PENDING - edges())
    assert not gone, f"remove from PENDING (no longer imported): {gone}"


def test_no_cycle_between_subpackages() -> None:
    found = cycles(unit_graph(edges()))
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_no_cycle_between_modules_of_a_subpackage() -> None:
    found = module_cycles(module_pairs())
    assert not found, (
        "import cycles inside a subpackage (move what both sides share into a module both "
        "import):\n" + "\n".join("  " + " -> ".join(c) for c in found)
    )


def test_the_checker_sees_lazy_and_type_checking_imports() -> None:
    code = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from psyche.daemon.engine import RoundEngine\n"
        "def f():\n    import psyche.cli.main\n    from psyche.protocol import bloom\n"
        "    from . import commitment\n"
    )
    assert {m for m in imports_in(code, "psyche.protocol") if m.startswith("psyche")} == {
        "psyche.daemon.engine",
        "psyche.cli.main",
        "psyche.protocol.bloom",
        "psyche.protocol.commitment",
    }
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert not cycles({"a": {"b"}, "b": set()})
    circle = {
        ("psyche.distro.dct", "psyche.distro.sign_bound"),
        ("psyche.distro.sign_bound", "psyche.distro.dct"),
        ("psyche.daemon.rounds", "psyche.distro.dct"),
    }
    assert module_cycles(circle) == [
        ["psyche.distro.dct", "psyche.distro.sign_bound", "psyche.distro.dct"]
    ]
    assert not module_cycles(
        {("psyche.daemon.a", "psyche.net.b"), ("psyche.net.b", "psyche.daemon.a")}
    )
    assert not allowed("psyche.daemon.engine", "psyche.backends.centralized.backend")
    assert allowed("psyche.daemon.engine", "psyche.backends.base")
    assert host_only("psyche.p2p.node", "trio") and host_only("psyche.daemon.engine", "libp2p.abc")
    assert host_only("psyche.p2p.process", "psyche.p2p.host.main")
    assert not host_only("psyche.p2p.host.service", "libp2p.peer.id")
    assert not host_only("psyche.p2p.host", "trio") and not host_only("psyche.p2p.node", "trio_x")


if __name__ == "__main__":
    graph = unit_graph(edges())
    for unit in sorted(graph):
        print(f"{unit:12} -> {', '.join(sorted(graph[unit]))}")
    if "-v" in sys.argv:
        for src, dst in sorted(edges()):
            print(f"  {src} -> {dst}")
