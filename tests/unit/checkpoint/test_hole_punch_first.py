"""A joiner reaches every offering peer directly before it fetches a large model's pieces.

A NAT'd holder is first reached through a relay that is itself a holder; once the pieces flow,
the relay's full uplink starves the hole punch, and the NAT'd holder's pieces keep crossing the
relay's uplink (bench/internet.py: 43.7 s against a 27.0 s bound, the hole punch succeeding one
second after the last piece). So the joiner dials every peer first (asking each for the small
manifest) and waits, bounded, for the connections to become direct. Here on the in-memory
network, with connections that turn direct some time after the first request reaches them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
import torch

from psyche.checkpoint import p2p
from psyche.checkpoint.manifest import Snapshot, build_snapshot
from psyche.checkpoint.p2p import Choice, SnapshotServer, fetch_snapshot
from psyche.p2p.errors import FetchError
from psyche.p2p.memory import MemoryNetwork, MemoryTransport
from psyche.p2p.transport import FetchResult
from psyche.protocol.identity import SecretKey


class PunchingTransport(MemoryTransport):
    """Every peer starts relayed; a request to one starts its hole punch, which succeeds
    ``punch_s`` later (never for peers in ``symmetric``; ``dead`` peers fail every request).
    Records when each piece request was sent."""

    def __init__(self, network: MemoryNetwork, peer_id: str, punch_s: float) -> None:
        super().__init__(network, peer_id)
        self.punch_s = punch_s
        self.punched_at: dict[str, float] = {}
        self.symmetric: set[str] = set()
        self.dead: set[str] = set()
        self.requests: list[tuple[float, str, bytes]] = []

    def direct_peers(self) -> set[str]:
        now = time.monotonic()
        return {p for p, t in self.punched_at.items() if t <= now}

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
        self.requests.append((time.monotonic(), peer, blob_hash))
        if peer in self.dead:
            raise FetchError(f"{peer} unreachable", [(peer, "dial failed")])
        if peer not in self.symmetric:
            self.punched_at.setdefault(peer, time.monotonic() + self.punch_s)
        await asyncio.sleep(0.02)  # a fetch takes a while, so the pieces span the punches
        return await super().fetch_detailed(
            blob_hash, from_any_of=from_any_of, max_size=max_size, timeout=timeout
        )


def _setup(punch_s: float) -> tuple[PunchingTransport, Snapshot, Choice, list[str]]:
    net = MemoryNetwork()
    keys = [SecretKey.generate() for _ in range(3)]
    servers = [net.node(k) for k in keys]
    joiner = PunchingTransport(net, "joiner", punch_s)
    g = torch.Generator().manual_seed(0)
    params = [(f"w{i}", torch.randn(32, 32, generator=g)) for i in range(16)]
    snap = build_snapshot(
        params, config_json='{"model_type": "llama"}', files={}, step=3, piece_size=1 << 10
    )
    for s in servers:
        s.set_allowed_peers(["joiner"])
        SnapshotServer(s).share(snap)
    joiner.set_allowed_peers([s.peer_id for s in servers])
    choice = Choice(
        snap.manifest_hash,
        len(snap.manifest_bytes),
        [k.public_key() for k in keys],
        votes=3,
        answers=3,
    )
    return joiner, snap, choice, [s.peer_id for s in servers]


def _pieces(joiner: PunchingTransport, snap: Snapshot) -> list[tuple[float, str]]:
    return [(t, p) for t, p, h in joiner.requests if h != snap.manifest_hash]


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat the test's small model as one worth waiting for."""
    monkeypatch.setattr(p2p, "HOLE_PUNCH_MIN_BYTES", 0)


@pytest.mark.usefixtures("large")
def test_pieces_are_fetched_once_every_peer_is_direct() -> None:
    async def main() -> None:
        joiner, snap, choice, peers = _setup(punch_s=0.3)
        t0 = time.monotonic()
        got = await fetch_snapshot(joiner, choice, step=3)
        assert got.manifest_hash == snap.manifest_hash
        asked = {p for _, p, h in joiner.requests if h == snap.manifest_hash}
        assert asked == set(peers)  # every peer dialled while the links are idle
        pieces = _pieces(joiner, snap)
        assert pieces and all(joiner.punched_at[p] <= t for t, p in pieces)
        assert {p for _, p in pieces} == set(peers)
        assert min(t for t, _ in pieces) - t0 < p2p.HOLE_PUNCH_WAIT_S  # not the full wait

    asyncio.run(main())


@pytest.mark.usefixtures("large")
def test_the_wait_is_bounded_where_no_hole_punch_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(p2p, "HOLE_PUNCH_WAIT_S", 0.5)

    async def main() -> None:
        joiner, snap, choice, peers = _setup(punch_s=0.05)
        joiner.symmetric = {peers[0]}  # stays relayed: fetched through the relay after the wait
        t0 = time.monotonic()
        got = await fetch_snapshot(joiner, choice, step=3)
        assert got.manifest_hash == snap.manifest_hash
        first = min(t for t, _ in _pieces(joiner, snap)) - t0
        assert 0.5 <= first < 0.5 + 3.0  # slack for a loaded machine
        assert peers[0] in {p for _, p in _pieces(joiner, snap)}

    asyncio.run(main())


@pytest.mark.usefixtures("large")
def test_an_unreachable_peer_is_not_waited_for() -> None:
    async def main() -> None:
        joiner, snap, choice, peers = _setup(punch_s=0.05)
        joiner.dead = {peers[2]}
        t0 = time.monotonic()
        got = await fetch_snapshot(joiner, choice, step=3)
        assert got.manifest_hash == snap.manifest_hash
        assert min(t for t, _ in _pieces(joiner, snap)) - t0 < 4.0  # not the 5 s wait

    asyncio.run(main())


def test_a_small_model_does_not_wait_for_hole_punches() -> None:
    async def main() -> None:
        joiner, snap, choice, _ = _setup(punch_s=60.0)  # nobody direct for the whole fetch
        assert snap.manifest.total_bytes < p2p.HOLE_PUNCH_MIN_BYTES
        t0 = time.monotonic()
        got = await fetch_snapshot(joiner, choice, step=3)
        assert got.manifest_hash == snap.manifest_hash
        assert min(t for t, _ in _pieces(joiner, snap)) - t0 < 2.0
        assert sum(h == snap.manifest_hash for _, _, h in joiner.requests) == 1

    asyncio.run(main())
