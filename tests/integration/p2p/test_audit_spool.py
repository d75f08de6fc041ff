"""A SparseLoCo trainer serves its audit chains from the files it recorded them into.

Two real :class:`P2PNode` hosts on 127.0.0.1. The trainer records each round's chain straight
into its node's blob directory (``AuditTrail.spool``), the daemon's ``AuditBlobs`` serves those
files without a copy and withdraws all but the two newest chains, deleting their files. A
verifier fetches every blob of the served chains by its BLAKE3 and none of the withdrawn one.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import torch

from psyche.daemon.audit_serving import AuditBlobs
from psyche.daemon.sparseloco_verifying import AUDIT_DIGEST, state_bound
from psyche.p2p.errors import P2PError
from psyche.p2p.node import P2PNode
from psyche.protocol.identity import SecretKey
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training import Preset, init_model, llama_config
from psyche.training.sparseloco_audit import AuditTrail, decode_state, state_hash
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

pytestmark = pytest.mark.slow

H = 2
LR = 4e-3
TINY = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=32)


def batch_of(seed: int, samples: int) -> torch.Tensor:
    return torch.randint(3, 259, (samples, 32), generator=torch.Generator().manual_seed(seed))


def _trainer() -> SparseLoCoTrainer:
    config = SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, clip_grad_norm=1.0, inner_steps=H,
        outer_lr=0.7, outer_momentum=0.0, topk_chunk=64, topk=2, value_bits=2, error_decay=0.95,
    )  # fmt: skip
    t = SparseLoCoTrainer(init_model(llama_config(TINY), seed=0), config, micro_batch_size=2)
    t.set_audit(True)
    return t


@contextlib.asynccontextmanager
async def _connected(run_id: str) -> AsyncIterator[tuple[P2PNode, P2PNode]]:
    """A trainer's node and a verifier's, started, allowing and connected to each other."""
    server, verifier = P2PNode(), P2PNode()
    await asyncio.gather(
        server.start(SecretKey.generate(), run_id=run_id),
        verifier.start(SecretKey.generate(), run_id=run_id),
    )
    try:
        server.set_allowed_peers([verifier.peer_id])
        verifier.set_allowed_peers([server.peer_id])
        await verifier.connect(server.listen_addrs)
        yield server, verifier
    finally:
        await asyncio.gather(server.stop(), verifier.stop())


def test_audit_chains_are_served_from_the_files_they_were_recorded_into() -> None:
    async def main() -> None:
        async with _connected("spool") as (server, verifier):
            t, served, chains = _trainer(), AuditBlobs(), []
            t.audit_spool = server.spool_dir
            for height in (1, 2, 3):
                t.train_step(batch_of(height, samples=4), step=height, lr=LR, prev_lr=LR,
                             prev_self_results=None, zero_optim=False)  # fmt: skip
                trail = t.take_trail()
                assert trail is not None and trail.states == []  # nothing held in memory
                chains.append((list(trail.hashes), list(trail.error_hashes)))
                files = dict(trail.files)
                await served.publish(server, height, trail)
                assert trail.files == {}  # the node's now
                for h, path in files.items():  # served in place, or a duplicate deleted
                    assert path.exists() == (server._served.get(h) == path)
            live = {h for states, errors in chains[1:] for h in (*states, *errors)}
            on_disk = {p for p in server.blob_dir.iterdir() if p.name.startswith("audit-")}
            assert len(on_disk) == len(live)  # one file per served blob, none left over
            for _ in range(100):  # withdrawn files are deleted in a worker thread
                if not any(p.name.endswith(".gone") for p in server.blob_dir.iterdir()):
                    break
                await asyncio.sleep(0.05)
            assert len(list(server.blob_dir.glob("audit-*"))) == len(live)
            assert not list(server.blob_dir.glob("*.gone"))
            assert chains[1][1][0] == chains[0][1][1]  # the blob both chains name
            bound = state_bound(tuple(t.shapes))
            for h in live:
                got = await verifier.fetch(
                    h, from_any_of=[server.peer_id], max_size=bound, timeout=10.0,
                    digest=AUDIT_DIGEST,
                )  # fmt: skip
                assert state_hash(got) == h
            first_state = await verifier.fetch(
                chains[2][0][0], from_any_of=[server.peer_id], max_size=bound, timeout=10.0,
                digest=AUDIT_DIGEST,
            )  # fmt: skip
            decode_state(first_state, t.shapes, chains[2][0][0], start=t.params)  # S_0
            gone = chains[0][0][0]
            with pytest.raises(P2PError):
                await verifier.fetch(
                    gone, from_any_of=[server.peer_id], max_size=bound, timeout=2.0,
                    attempt_timeout=1.0, digest=AUDIT_DIGEST,
                )  # fmt: skip

    asyncio.run(main())


def test_the_next_chain_is_written_over_the_withdrawn_one() -> None:
    """With the node's ``recycle_dir`` as the trainer's pool, the chain withdrawn at a publish
    goes there instead of being deleted, and the next round's chain is written into those same
    files (no new file, no page allocation); everything served still fetches by its hash, and
    the pool is empty after each round."""

    async def main() -> None:
        async with _connected("pool") as (server, verifier):
            t, served = _trainer(), AuditBlobs()
            t.audit_spool, t.audit_pool = server.spool_dir, server.recycle_dir
            pool = server.recycle_dir
            assert pool is not None
            withdrawn: set[int] = set()
            for height in range(1, 6):
                t.train_step(batch_of(height, samples=4), step=height, lr=LR, prev_lr=LR,
                             prev_self_results=None, zero_optim=False)  # fmt: skip
                trail = t.take_trail()
                assert trail is not None
                inodes = {p.stat().st_ino for p in trail.files.values()}
                assert len(inodes) == H + 3  # H + 1 states, two error buffers
                assert (height >= 4) == (inodes == withdrawn)  # every file a pooled one
                assert not pool.exists() or list(pool.iterdir()) == []  # trimmed or consumed
                await served.publish(server, height, trail)
                withdrawn = {p.stat().st_ino for p in pool.iterdir()} if pool.exists() else set()
                # The new chain's copy of the error buffers before it (the last chain's after
                # it), and from round 3 the withdrawn chain (two stay served): H + 1 states and
                # the error buffers after it.
                assert len(withdrawn) == {1: 0, 2: 1}.get(height, H + 3)
                for h in trail.hashes:
                    got = await verifier.fetch(
                        h, from_any_of=[server.peer_id], max_size=state_bound(tuple(t.shapes)),
                        timeout=10.0, digest=AUDIT_DIGEST,
                    )  # fmt: skip
                    assert state_hash(got) == h
            assert not list(server.blob_dir.glob("*.gone"))  # nothing was deleted

    asyncio.run(main())


def test_a_trail_kept_in_memory_is_served_as_before() -> None:
    """Without a spool directory (the in-memory transport) the trail keeps bytes."""
    t = _trainer()
    t.train_step(batch_of(1, samples=4), step=1, lr=LR, prev_lr=LR, prev_self_results=None,
                 zero_optim=False)  # fmt: skip
    trail = t.take_trail()
    assert isinstance(trail, AuditTrail) and trail.files == {}
    assert [h for h, _ in trail.kept()] == [*trail.hashes, *trail.error_hashes]


def test_the_spool_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/audit_spool.py (figures in bench/README.md) runs on this code, and the spooled
    trail holds nothing in the heap."""
    path = Path(__file__).resolve().parents[3] / "bench" / "audit_spool.py"
    spec = importlib.util.spec_from_file_location("bench_audit_spool", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--rounds", "2", "--inner-steps", "2", "--batch", "1", "--seq", "16"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line
        for line in out.splitlines()
        if line.split()[:1] in (["memory"], ["spool"])
    }
    assert set(rows) == {"memory", "spool"}
    assert rows["spool"].split()[-2] == "0" and rows["memory"].split()[-2] != "0"
