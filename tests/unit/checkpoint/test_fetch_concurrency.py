"""A joiner keeps at most two piece requests in flight per offering peer.

More would split a peer's uplink into slices too thin for the request timeout: on the emulated
internet (bench/internet.py), eight requests over two 20 Mbit/s uplinks timed out every 8 MiB
piece of the medium model. Measured here on the in-memory network with slow fetches.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import torch

from psyche.checkpoint.manifest import build_snapshot
from psyche.checkpoint.p2p import PER_PEER_REQUESTS, Choice, SnapshotServer, fetch_snapshot
from psyche.p2p.memory import MemoryNetwork, MemoryTransport
from psyche.p2p.transport import FetchResult
from psyche.protocol.identity import SecretKey


class CountingTransport(MemoryTransport):
    """Records the most requests in flight to each peer at once; each takes 20 ms."""

    def __init__(self, network: MemoryNetwork, peer_id: str) -> None:
        super().__init__(network, peer_id)
        self.in_flight: Counter[str] = Counter()
        self.most: Counter[str] = Counter()

    async def fetch_detailed(
        self,
        blob_hash: bytes,
        *,
        from_any_of: Sequence[str],
        max_size: int,
        timeout: float = 600.0,
        attempt_timeout: float = 10.0,
    ) -> FetchResult:
        peer = from_any_of[0]
        self.in_flight[peer] += 1
        self.most[peer] = max(self.most[peer], self.in_flight[peer])
        try:
            await asyncio.sleep(0.02)
            return await super().fetch_detailed(
                blob_hash, from_any_of=from_any_of, max_size=max_size, timeout=timeout
            )
        finally:
            self.in_flight[peer] -= 1


def test_piece_requests_per_peer_are_bounded() -> None:
    async def main() -> None:
        net = MemoryNetwork()
        keys = [SecretKey.generate() for _ in range(3)]
        servers = [net.node(k) for k in keys[:2]]
        joiner = CountingTransport(net, "joiner")
        g = torch.Generator().manual_seed(0)
        params = [(f"w{i}", torch.randn(64, 64, generator=g)) for i in range(16)]
        snap = build_snapshot(
            params, config_json='{"model_type": "llama"}', files={}, step=3, piece_size=4 << 10
        )
        for s in servers:
            s.set_allowed_peers(["joiner"])
            SnapshotServer(s).share(snap)
        joiner.set_allowed_peers([s.peer_id for s in servers])
        choice = Choice(
            snap.manifest_hash,
            len(snap.manifest_bytes),
            [k.public_key() for k in keys[:2]],
            votes=2,
            answers=2,
        )
        got = await fetch_snapshot(joiner, choice, step=3, max_concurrent=8)
        assert got.manifest_hash == snap.manifest_hash
        assert len(snap.pieces) > 8  # enough pieces that 8 requests could be in flight at once
        assert max(joiner.most.values()) <= PER_PEER_REQUESTS, joiner.most

    asyncio.run(main())
