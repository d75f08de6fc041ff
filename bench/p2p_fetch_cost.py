"""CPU a blob fetch costs two real libp2p hosts (loopback), for small and large blobs.

Two :class:`psyche.p2p.node.P2PNode` s (each its own host process, as a client has), connected;
A serves ``--count`` random blobs of ``--size`` bytes and B fetches them all, ``--concurrency``
at a time. Printed: wall seconds, and the CPU seconds of each host process per fetch (from
``/proc/PID/stat``). Small blobs measure what every stream costs (negotiation, Noise and Yamux
frames), large ones the transfer itself. To compare two builds, run it under each
(``PYTHONPATH=<other tree>/client``: the hosts then import that tree's host code).

    .venv/bin/python bench/p2p_fetch_cost.py --count 400 --size 5534
    .venv/bin/python bench/p2p_fetch_cost.py --count 12 --size 16000000 --concurrency 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from scale import _proc_cpu  # beside this file, not a package


async def measure(count: int, size: int, concurrency: int) -> dict[str, float]:
    from psyche.p2p.node import P2PNode
    from psyche.protocol.identity import SecretKey

    a, b = P2PNode(), P2PNode()
    await asyncio.gather(
        a.start(SecretKey.generate(), run_id="fetch-cost"),
        b.start(SecretKey.generate(), run_id="fetch-cost"),
    )
    try:
        a.set_allowed_peers([b.peer_id])
        b.set_allowed_peers([a.peer_id])
        await b.connect(a.listen_addrs)
        await asyncio.sleep(2.0)  # identify and gossip set-up are not part of a fetch
        blobs = [a.serve(os.urandom(size)) for _ in range(count)]
        cpu0 = (_proc_cpu(a.pid), _proc_cpu(b.pid))
        t0 = time.monotonic()
        sem = asyncio.Semaphore(concurrency)

        async def one(blob: bytes) -> None:
            async with sem:
                await b.fetch_detailed(blob, from_any_of=[a.peer_id], max_size=size, timeout=120)

        await asyncio.gather(*(one(h) for h in blobs))
        wall = time.monotonic() - t0
        cpu1 = (_proc_cpu(a.pid), _proc_cpu(b.pid))
        return {
            "wall_s": wall,
            "server_ms_per_fetch": 1000 * (cpu1[0] - cpu0[0]) / count,
            "fetcher_ms_per_fetch": 1000 * (cpu1[1] - cpu0[1]) / count,
        }
    finally:
        await asyncio.gather(a.stop(), b.stop(), return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=400, help="blobs fetched")
    parser.add_argument("--size", type=int, default=5534, help="bytes per blob")
    parser.add_argument("--concurrency", type=int, default=4, help="fetches at once")
    args = parser.parse_args()
    r = asyncio.run(measure(args.count, args.size, args.concurrency))
    print(
        f"{args.count} fetches of {args.size} B ({args.concurrency} at once): wall "
        f"{r['wall_s']:.2f} s; CPU per fetch: server {r['server_ms_per_fetch']:.2f} ms, "
        f"fetcher {r['fetcher_ms_per_fetch']:.2f} ms"
    )


if __name__ == "__main__":
    main()
