"""P2P soak: 3 nodes gossip and trade 1 MiB blobs for a while; report delivery and host memory.

Method. One asyncio process starts three :class:`P2PNode`s (each spawns its own libp2p host
process, as the daemon does) on 127.0.0.1, connects them in a full mesh and allows each other.
For ``--seconds`` (default 60) every node:

- publishes a signed announcement every 0.1 s (10 msg/s): nine ``Finished`` and, once a second,
  one ``TrainingResult`` naming a fresh 1 MiB random blob it serves;
- fetches, for every ``TrainingResult`` its ring successor announces, that blob from
  ``[announcer, third node]`` (so roughly one 1 MiB fetch per second per node) with
  :meth:`P2PNode.fetch`, which verifies the SHA-256 and then serves the copy itself;
- decodes and verifies every announcement it receives (:func:`open_announcement`);
- unserves (deletes) own and fetched blobs older than 5 s, as the daemon's blob GC would.

Figures, all from this run: announcements delivered / expected per node (each node should get every
announcement of the other two), gossip delivery latency (publish call to receipt, same clock), fetch
count, failures and latency, and each host process's RSS after a 5 s warm-up versus at the end (the
ratio is the memory growth over the run; docs/architecture.md, "The libp2p host process", asks to
watch it, because py-libp2p keeps one internal list that grows ~32 B per message).

    .venv/bin/python bench/p2p_soak.py --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import dataclass, field

from psyche.p2p.errors import FetchError
from psyche.p2p.messages import (
    Finished,
    TrainingResult,
    WireCommitment,
    open_announcement,
    sign_announcement,
)
from psyche.p2p.node import P2PNode
from psyche.protocol.commitment import make_commitment
from psyche.protocol.identity import SecretKey

BLOB_SIZE = 1 << 20
GC_AGE = 5.0


@dataclass
class Stats:
    published: int = 0
    received: int = 0
    bad: int = 0
    latencies: list[float] = field(default_factory=list)
    fetched: int = 0
    fetch_failed: int = 0
    fetch_seconds: list[float] = field(default_factory=list)


class SoakNode:
    def __init__(self, name: str, node: P2PNode, key: SecretKey) -> None:
        self.name, self.node, self.key = name, node, key
        self.stats = Stats()
        self.sent_at: dict[int, float] = {}
        self.blobs: list[tuple[float, bytes]] = []  # (served at, hash), own and fetched
        self.fetches: set[asyncio.Task[None]] = set()

    async def publish(self, until: float) -> None:
        seq = 0
        while time.monotonic() < until:
            seq += 1
            if seq % 10 == 0:
                blob_hash = self.node.serve(os.urandom(BLOB_SIZE))
                self.blobs.append((time.monotonic(), blob_hash))
                payload: TrainingResult | Finished = TrainingResult(
                    step=seq,
                    batch_start=seq,
                    batch_end=seq,
                    commitment=WireCommitment.of(make_commitment(self.key, blob_hash)),
                    blob_hash=blob_hash,
                    blob_size=BLOB_SIZE,
                    nonce=0,
                )
            else:
                payload = Finished(step=seq, warmup=False)
            self.sent_at[seq] = time.monotonic()
            await self.node.announce(sign_announcement(self.key, payload))
            self.stats.published += 1
            self.gc()
            await asyncio.sleep(max(0.0, self.sent_at[seq] + 0.1 - time.monotonic()))

    def gc(self) -> None:
        now = time.monotonic()
        while self.blobs and now - self.blobs[0][0] > GC_AGE:
            self.node.unserve(self.blobs.pop(0)[1])

    async def consume(self, nodes: dict[str, SoakNode], successor: str, third: str) -> None:
        async for peer, data in self.node.announcements():
            try:
                ann = open_announcement(data, from_peer=peer)
            except Exception:
                self.stats.bad += 1
                continue
            self.stats.received += 1
            sent = nodes[peer].sent_at.get(ann.payload.step)
            if sent is not None:
                self.stats.latencies.append(time.monotonic() - sent)
            if isinstance(ann.payload, TrainingResult) and peer == successor:
                task = asyncio.create_task(self.fetch(ann.payload.blob_hash, [peer, third]))
                self.fetches.add(task)
                task.add_done_callback(self.fetches.discard)

    async def fetch(self, blob_hash: bytes, peers: list[str]) -> None:
        t0 = time.monotonic()
        try:
            await self.node.fetch(blob_hash, from_any_of=peers, max_size=BLOB_SIZE, timeout=30)
        except FetchError:
            self.stats.fetch_failed += 1
            return
        self.stats.fetched += 1
        self.stats.fetch_seconds.append(time.monotonic() - t0)
        self.blobs.append((time.monotonic(), blob_hash))


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


async def main(seconds: float) -> None:
    keys = [SecretKey.generate() for _ in range(3)]
    nodes = [P2PNode() for _ in range(3)]
    t0 = time.monotonic()
    await asyncio.gather(*(n.start(k, run_id="soak") for n, k in zip(nodes, keys, strict=True)))
    print(f"3 hosts started in {time.monotonic() - t0:.1f} s")
    try:
        for n in nodes:
            n.set_allowed_peers(m.peer_id for m in nodes if m is not n)
        for i, n in enumerate(nodes):
            for m in nodes[i + 1 :]:
                await n.connect(m.listen_addrs)
        await asyncio.gather(*(n.wait_for_gossip_peers(2, 30) for n in nodes))
        pairs = enumerate(zip(nodes, keys, strict=True))
        soak = {n.peer_id: SoakNode("ABC"[i], n, k) for i, (n, k) in pairs}
        ids = [n.peer_id for n in nodes]
        consumers = [
            asyncio.create_task(soak[ids[i]].consume(soak, ids[(i + 1) % 3], ids[(i + 2) % 3]))
            for i in range(3)
        ]
        until = time.monotonic() + seconds
        publishers = [asyncio.create_task(s.publish(until)) for s in soak.values()]
        await asyncio.sleep(min(5.0, seconds / 2))
        rss_start = [n.memory_rss() for n in nodes]
        await asyncio.gather(*publishers)
        await asyncio.sleep(3.0)  # let the last gossip and fetches land
        rss_end = [n.memory_rss() for n in nodes]
        for task in [*consumers, *(t for s in soak.values() for t in s.fetches)]:
            task.cancel()
        print(f"\n{seconds:g} s soak, 3 nodes, 10 msg/s each, one 1 MiB fetch/s per node\n")
        header = "node  published  delivered/expected  bad  gossip p50/p95 ms  fetched  failed"
        print(header + "  fetch p50/p95 ms  host RSS start→end MB (ratio)")
        for i, s in enumerate(soak.values()):
            st = s.stats
            expected = sum(o.stats.published for o in soak.values() if o is not s)
            c = nodes[i].counters
            print(
                f"{s.name:>4}  {st.published:>9}  {st.received:>8}/{expected:<9}"
                f"  {st.bad:>3}  {_pct(st.latencies, 0.5):>7.1f}/{_pct(st.latencies, 0.95):<8.1f}"
                f"  {st.fetched:>7}  {st.fetch_failed:>6}"
                f"  {_pct(st.fetch_seconds, 0.5):>7.1f}/{_pct(st.fetch_seconds, 0.95):<8.1f}"
                f"  {rss_start[i] / 1e6:.1f}→{rss_end[i] / 1e6:.1f}"
                f" ({rss_end[i] / rss_start[i]:.3f})"
            )
            print(
                f"      host counters: dropped not-allowed {c.dropped_not_allowed}, oversize "
                f"{c.dropped_oversize}, overflow {c.dropped_overflow}; blobs served "
                f"{c.blobs_served}, refused {c.blob_requests_refused}"
            )
        all_lat = [x for s in soak.values() for x in s.stats.latencies]
        print(
            f"\nall gossip: median {statistics.median(all_lat) * 1000:.1f} ms over {len(all_lat)}"
        )
    finally:
        await asyncio.gather(*(n.stop() for n in nodes))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    asyncio.run(main(parser.parse_args().seconds))
