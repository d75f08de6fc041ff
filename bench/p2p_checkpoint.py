"""P2P model fetch for joiners: fetch time of 10 M / 50 M / 100 M parameters from 1, 2, 4 peers.

Method. One asyncio process starts five :class:`P2PNode`s on 127.0.0.1 (each spawns its own
libp2p host process, as the daemon does): four servers and one joiner. For each model size a
set of fp32 tensors of 2²⁰ parameters each is built and turned into a P2P snapshot
(:func:`psyche.checkpoint.manifest.build_snapshot`: manifest + 8 MiB pieces); the pieces are
written once to /dev/shm and served by every server (``serve_file``). The joiner then runs the
real joiner code, :func:`psyche.checkpoint.p2p.fetch_snapshot` — manifest, pieces in parallel
(at most 8 requests at once, spread over the peers), per-tensor verification, tensors rebuilt —
from the first 1, 2 or 4 servers, and the result's model hash is checked against the source.

Baseline, measured in the same run: plain asyncio TCP throughput over loopback (one connection,
1 MiB writes). The figure printed is ``fetch seconds / (model bytes / loopback throughput)``:
how many times longer than a bare socket copy of the weights the joiner takes, end to end.

    .venv/bin/python bench/p2p_checkpoint.py            # 10 M, 50 M, 100 M × 1, 2, 4 peers
    .venv/bin/python bench/p2p_checkpoint.py --quick    # 10 M × 1, 2 peers
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
import time
from pathlib import Path

import torch

from psyche.checkpoint.manifest import build_snapshot
from psyche.checkpoint.p2p import Choice, fetch_snapshot
from psyche.p2p.node import P2PNode
from psyche.protocol.identity import SecretKey
from psyche.training.hashing import tensors_hash

TENSOR_PARAMS = 1 << 20
CONFIG = '{"model_type": "llama"}'


async def loopback_throughput(nbytes: int) -> float:
    """Bytes/s of one plain asyncio TCP connection on 127.0.0.1 (1 MiB writes)."""
    chunk = b"\0" * (1 << 20)
    done = asyncio.Event()
    got = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal got
        while data := await reader.read(1 << 20):
            got += len(data)
        done.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    for _ in range(nbytes // len(chunk)):
        writer.write(chunk)
        await writer.drain()
    writer.close()
    await done.wait()
    seconds = time.perf_counter() - t0
    server.close()
    return got / seconds


async def start_nodes(n: int) -> tuple[list[P2PNode], list[SecretKey]]:
    keys = [SecretKey.generate() for _ in range(n)]
    nodes = [P2PNode() for _ in range(n)]
    await asyncio.gather(
        *(node.start(k, run_id="bench") for node, k in zip(nodes, keys, strict=True))
    )
    for node in nodes:
        node.set_allowed_peers([o.peer_id for o in nodes if o is not node])
    await nodes[-1].connect([a for o in nodes[:-1] for a in o.listen_addrs])
    return nodes, keys


def make_tensors(n_params: int, seed: int) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    count = max(1, round(n_params / TENSOR_PARAMS))
    return [
        (f"layers.{i:03}.weight", torch.randn(TENSOR_PARAMS, generator=g)) for i in range(count)
    ]


async def bench(sizes: list[int], peer_counts: list[int], loop_bytes: int) -> None:
    tcp = await loopback_throughput(loop_bytes)
    print(f"loopback TCP baseline: {tcp / 1e6:.0f} MB/s ({loop_bytes >> 20} MiB, one connection)")
    nodes, keys = await start_nodes(max(peer_counts) + 1)
    servers, joiner = nodes[:-1], nodes[-1]
    shm = Path(tempfile.mkdtemp(prefix="psyche-bench-", dir="/dev/shm"))
    head = ("params", "bytes", "peers", "seconds", "MB/s", "ratio")
    print("{:>8} {:>11} {:>5} {:>8} {:>6} {:>6}  blobs per peer".format(*head))
    try:
        for size in sizes:
            tensors = make_tensors(size, seed=size)
            want = tensors_hash(tensors)
            snap = build_snapshot(tensors, config_json=CONFIG, files={}, step=1)
            del tensors
            paths = []
            for i, (piece, entry) in enumerate(zip(snap.pieces, snap.manifest.pieces, strict=True)):
                path = shm / f"{size}-{i}"
                path.write_bytes(piece)
                paths.append((path, entry))
            for s in servers:
                s.serve(snap.manifest_bytes)
                for path, entry in paths:
                    s.serve_file(path, blob_hash=entry.sha256, size=entry.size)
            total = snap.manifest.total_bytes
            n_params = total // 4
            del snap.pieces[:]
            for k in peer_counts:
                choice = Choice(
                    snap.manifest_hash,
                    len(snap.manifest_bytes),
                    [key.public_key() for key in keys[:k]],
                    votes=k,
                    answers=k,
                )
                t0 = time.perf_counter()
                got = await fetch_snapshot(joiner, choice, step=1, max_concurrent=8)
                seconds = time.perf_counter() - t0
                assert tensors_hash(got.tensors.items()) == want == got.manifest.model_hash
                ratio = seconds / (total / tcp)
                spread = sorted(got.sources.values(), reverse=True)
                print(
                    f"{n_params / 1e6:7.1f}M {total:>11} {k:>5} {seconds:8.2f} "
                    f"{total / seconds / 1e6:6.0f} {ratio:6.1f}  {spread}",
                    flush=True,
                )
                del got
            for s in servers:
                s.unserve(snap.manifest_hash)
                for _, entry in paths:
                    s.unserve(entry.sha256)
            for path, _ in paths:
                path.unlink()
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        for node in nodes:
            with contextlib.suppress(Exception):
                await node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 M parameters, 1 and 2 peers")
    args = parser.parse_args()
    if args.quick:
        asyncio.run(bench([10_000_000], [1, 2], 256 << 20))
    else:
        asyncio.run(bench([10_000_000, 50_000_000, 100_000_000], [1, 2, 4], 1 << 30))


if __name__ == "__main__":
    main()
