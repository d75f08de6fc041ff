"""How long a SparseLoCo trainer's publishing of its audit chain holds up its event loop.

A trainer in a run that verifies serves its round's inner states and error buffers to its
verifiers (``psyche.daemon.audit_serving.AuditBlobs.publish``): on the tiny preset three states
of 14.2 MB and two buffers of 4.7 MB per round (H = 2). ``P2PNode.serve`` hashes and writes each
on the event loop; ``serve_known`` takes the hash the trail already has and writes in a worker
thread. This starts one real P2P node (its host process) and publishes the same chain both ways,
alternating, while a 1 ms ticker measures the longest stall of the loop.

    .venv/bin/python bench/audit_publish.py --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import time
from collections.abc import Awaitable, Callable

TINY_CHAIN = (14_194_196,) * 3 + (4_728_000,) * 2


async def _stall_during(run: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """(longest event-loop stall, wall time) of ``run``, in seconds."""
    worst, stop = 0.0, False

    async def tick() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst, last = max(worst, now - last), now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    await run()
    wall = time.perf_counter() - t0
    stop = True
    await ticker
    return worst, wall


async def _main(rounds: int) -> None:
    from psyche.p2p.node import P2PNode
    from psyche.protocol.identity import SecretKey

    node = P2PNode()
    await node.start(SecretKey.generate(), run_id="audit-publish-bench")
    got: dict[str, list[tuple[float, float]]] = {"serve": [], "serve_known": []}
    try:
        for _ in range(rounds):
            blobs = [os.urandom(n) for n in TINY_CHAIN]
            hashes = [hashlib.sha256(b).digest() for b in blobs]

            async def old(blobs: list[bytes] = blobs) -> None:
                for b in blobs:
                    node.serve(b, handoff=False)

            async def new(blobs: list[bytes] = blobs, hashes: list[bytes] = hashes) -> None:
                for b, h in zip(blobs, hashes, strict=True):
                    await node.serve_known(b, h, handoff=False)

            for name, run in (("serve", old), ("serve_known", new)):
                got[name].append(await _stall_during(run))
                for h in hashes:
                    node.unserve(h)
    finally:
        await node.stop()
    med = {k: (statistics.median(s for s, _ in v), statistics.median(w for _, w in v))
           for k, v in got.items()}  # fmt: skip
    for name, (stall, wall) in med.items():
        print(f"{name:12s} publish {wall * 1e3:6.1f} ms   longest loop stall {stall * 1e3:6.1f} ms")
    print(f"stall ratio serve_known / serve: {med['serve_known'][0] / med['serve'][0]:.3f}")
    print(f"publish ratio serve_known / serve: {med['serve_known'][1] / med['serve'][1]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="chains published each way")
    args = parser.parse_args()
    asyncio.run(_main(args.rounds))


if __name__ == "__main__":
    main()
