"""CPU an idle real libp2p host burns per second, connected to a run's other members.

N :class:`psyche.p2p.node.P2PNode` s (each its own host process, as a client has) in a full
mesh on loopback, allowed to each other, then left alone: no announcement, no blob. After
``--settle`` seconds (dials, identify, the gossip mesh) each host process's CPU (from
``/proc/PID/stat``) is measured over ``--seconds``. What remains is the background work a host
pays every second of a round whatever it carries (gossip heartbeats, pings, keep-alives, the
once-a-second report to its client), so a long round on loaded cores pays it many times over.
To compare two builds, run it under each (``PYTHONPATH=<other tree>/client``: the hosts then
import that tree's host code).

    .venv/bin/python bench/p2p_idle.py --hosts 16 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import time

from scale import _proc_cpu, full_mesh  # beside this file, not a package


async def measure(hosts: int, seconds: float, settle: float) -> dict[str, float]:
    from psyche.p2p.node import P2PNode
    from psyche.protocol.identity import SecretKey

    nodes = [P2PNode() for _ in range(hosts)]
    for i in range(0, hosts, 8):
        batch = nodes[i : i + 8]
        await asyncio.gather(*(n.start(SecretKey.generate(), run_id="idle") for n in batch))
    try:
        await full_mesh(nodes)
        await asyncio.sleep(settle)
        cpu0 = [_proc_cpu(n.pid) for n in nodes]
        parent0 = time.process_time()
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        dt = time.monotonic() - t0
        per_s = [(_proc_cpu(n.pid) - c) / dt for n, c in zip(nodes, cpu0, strict=True)]
        return {
            "hosts": hosts,
            "seconds": dt,
            "host_cpu_per_s_mean": sum(per_s) / hosts,
            "host_cpu_per_s_max": max(per_s),
            "parent_cpu_per_s": (time.process_time() - parent0) / dt,
        }
    finally:
        await asyncio.gather(*(n.stop() for n in nodes), return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=15.0)
    args = parser.parse_args()
    r = asyncio.run(measure(args.hosts, args.seconds, args.settle))
    print(
        f"{r['hosts']} hosts idle for {r['seconds']:.1f} s: host CPU s per s mean "
        f"{r['host_cpu_per_s_mean']:.4f}, max {r['host_cpu_per_s_max']:.4f}; parent (all "
        f"{r['hosts']} P2PNodes) {r['parent_cpu_per_s']:.4f}"
    )


if __name__ == "__main__":
    main()
