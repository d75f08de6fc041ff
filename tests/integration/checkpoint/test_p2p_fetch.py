"""A joiner fetches a model from real libp2p peers: in parallel, verified, past bad peers.

Four :class:`P2PNode` hosts on 127.0.0.1 (one child process each): two honest servers, one
liar that serves corrupted or oversized bytes under the right hashes, and the joiner. One
honest server is also stopped while the joiner fetches. The joiner must end with the exact
model (same hash), having taken pieces from more than one peer and retried the liar's pieces
elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import torch

from psyche.checkpoint.manifest import build_snapshot
from psyche.checkpoint.p2p import Choice, PeerFetchError, SnapshotServer, fetch_snapshot
from psyche.p2p.node import P2PNode
from psyche.protocol.identity import SecretKey
from psyche.training.hashing import tensors_hash

pytestmark = pytest.mark.slow

CONFIG = '{"model_type": "llama"}'
RUN = "ckpt-test"


def _params() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(f"layer{i}.weight", torch.randn(256, 256, generator=g)) for i in range(24)]


async def _start(n: int) -> tuple[list[P2PNode], list[SecretKey]]:
    keys = [SecretKey.generate() for _ in range(n)]
    nodes = [P2PNode() for _ in range(n)]
    await asyncio.gather(*(node.start(k, run_id=RUN) for node, k in zip(nodes, keys, strict=True)))
    for node in nodes:
        node.set_allowed_peers([o.peer_id for o in nodes if o is not node])
    await asyncio.gather(
        *(nodes[-1].connect(o.listen_addrs) for o in nodes[:-1]),
    )
    return nodes, keys


def _lie(node: P2PNode, snap_pieces: list[bytes], hashes: list[bytes], where: Path) -> None:
    """Serve wrong content under the right hashes: flipped bytes, or one byte too many."""
    where.mkdir()
    for i, (piece, h) in enumerate(zip(snap_pieces, hashes, strict=True)):
        bad = bytes([piece[0] ^ 1]) + piece[1:] if i % 2 else piece + b"!"
        path = where / f"{i}"
        path.write_bytes(bad)
        node.serve_file(path, blob_hash=h, size=len(bad))


def test_joiner_fetches_from_several_peers_past_liars_and_a_vanishing_peer(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        nodes, keys = await _start(4)
        honest1, honest2, liar, joiner = nodes
        try:
            snap = build_snapshot(
                _params(),
                config_json=CONFIG,
                files={"tokenizer.json": b'{"x": 1}'},
                step=9,
                piece_size=256 << 10,
            )
            for node in (honest1, honest2):
                SnapshotServer(node).share(snap)
            liar.serve(snap.manifest_bytes)
            _lie(liar, snap.pieces, [p.sha256 for p in snap.manifest.pieces], tmp_path / "lies")
            choice = Choice(
                snap.manifest_hash,
                len(snap.manifest_bytes),
                [k.public_key() for k in keys[:3]],
                votes=3,
                answers=3,
            )
            fetch = asyncio.create_task(
                fetch_snapshot(
                    joiner,
                    choice,
                    step=9,
                    max_concurrent=4,
                    request_timeout=1.5,
                    max_peer_errors=3,
                )
            )
            await asyncio.sleep(0.3)
            await honest2.stop()  # vanishes while the joiner is fetching
            got = await fetch
            assert tensors_hash(got.tensors.items()) == tensors_hash(_params())
            assert got.manifest.model_hash == tensors_hash(_params())
            assert got.files == {"tokenizer.json": b'{"x": 1}'}
            assert got.failures.get(liar.peer_id, 0) >= 1, got
            assert liar.peer_id not in got.sources
            assert sum(got.sources.values()) == len(snap.pieces) + 2  # manifest + file
            # Nothing the joiner fetched stays served under its name.
            assert not joiner.served()
            # A manifest that only unreachable or lying peers could serve: a clear error.
            nobody = Choice(b"\x01" * 32, 100, [k.public_key() for k in keys[1:3]], 2, 2)
            with pytest.raises(PeerFetchError, match="peers unreachable"):
                await fetch_snapshot(joiner, nobody, step=9, request_timeout=1.0, max_peer_errors=1)
        finally:
            for node in nodes:
                with contextlib.suppress(Exception):
                    await node.stop()

    asyncio.run(main())
