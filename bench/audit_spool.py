"""A SparseLoCo trainer's audit chain kept in memory, or recorded into the files it is served from.

In a run that verifies, a SparseLoCo trainer records its round's H + 1 inner states and two
error buffers (``AuditTrail``) and serves them to its verifiers from its P2P blob directory
(``AuditBlobs.publish``). Kept in memory, each blob is joined into one ``bytes`` while it is
recorded and written to the blob directory when the result is published (``serve_known``, in a
worker thread): the chain sits in the heap and in the blob directory at once. Spooled
(``AuditTrail.spool``, the daemon's way since 2026-12-05), each blob is streamed into its own
file in the blob directory as it is hashed, and publishing only registers the files.

One real P2P node (its host process), the tiny preset, one torch thread; the rounds alternate
the two ways. Per round: the trail's recording CPU (``AuditTrail.cpu_s``), the publish's wall
time and the event loop's longest stall during it, the process's resident memory at its peak
during the round above its level before it (sampled every millisecond), and the bytes the trail
held in the heap.

    .venv/bin/python bench/audit_spool.py --rounds 6 --inner-steps 16 --batch 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6, help="rounds in all, alternating the ways")
    p.add_argument("--inner-steps", type=int, default=16, help="H")
    p.add_argument("--batch", type=int, default=4, help="samples per inner step")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


async def _round(trainer: Any, node: Any, served: Any, batch: Any, step: int) -> dict[str, float]:
    peak, stall, stop = 0, 0.0, False

    async def sample() -> None:
        nonlocal peak, stall
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            stall, last, peak = (
                max(stall, now - last) if publishing else stall,
                now,
                max(peak, _rss()),
            )

    publishing = False
    base = _rss()
    ticker = asyncio.create_task(sample())
    kw = {"step": step, "lr": 3e-3, "prev_lr": 3e-3, "prev_self_results": None, "zero_optim": False}
    await asyncio.to_thread(trainer.train_step, batch, **kw)
    trail = trainer.take_trail()
    held = sum(len(b) for b in (*trail.states, *trail.errors))
    cpu = trail.cpu_s
    publishing, t0 = True, time.perf_counter()
    await served.publish(node, step, trail)
    wall = time.perf_counter() - t0
    del trail
    stop = True
    await ticker
    return {
        "record_cpu_s": cpu,
        "publish_s": wall,
        "stall_s": stall,
        "rss_rise_mb": (peak - base) / 1e6,
        "heap_mb": held / 1e6,
    }


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from psyche.daemon.audit_serving import AuditBlobs
    from psyche.p2p.node import P2PNode
    from psyche.protocol.identity import SecretKey
    from psyche.protocol.optimizers import SparseLoCoOptimizer
    from psyche.training import init_model, llama_config
    from psyche.training.presets import PRESETS
    from psyche.training.sparseloco_trainer import SparseLoCoTrainer

    torch.set_num_threads(1)
    opt = SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8, clip_grad_norm=1.0,
        inner_steps=args.inner_steps, outer_lr=1.0, outer_momentum=0.0, topk_chunk=256, topk=8,
        value_bits=2, error_decay=0.95,
    )  # fmt: skip
    trainer = SparseLoCoTrainer(
        init_model(llama_config(PRESETS["tiny"]), seed=0), opt, micro_batch_size=args.batch
    )
    trainer.set_audit(True)
    gen = torch.Generator().manual_seed(0)
    node = P2PNode()
    await node.start(SecretKey.generate(), run_id="audit-spool-bench")
    rows: dict[str, list[dict[str, float]]] = {"memory": [], "spool": []}
    served = AuditBlobs()
    try:
        for r in range(args.rounds + 1):  # round 0 warms up (moments exist, pages touched)
            way = "spool" if r % 2 else "memory"
            trainer.audit_spool = node.spool_dir if way == "spool" else None
            batch = torch.randint(3, 259, (args.inner_steps * args.batch, args.seq), generator=gen)
            row = await _round(trainer, node, served, batch, r + 1)
            if r:
                rows[way].append(row)
    finally:
        await node.stop()
    med = {w: {k: statistics.median(x[k] for x in v) for k in v[0]} for w, v in rows.items()}
    print(f"H = {args.inner_steps}, {args.batch} samples per inner step, medians of "
          f"{len(rows['memory'])} and {len(rows['spool'])} rounds")  # fmt: skip
    print(f"{'':8s} {'record CPU':>11s} {'publish':>9s} {'loop stall':>11s} "
          f"{'RSS rise':>9s} {'heap held':>10s}")  # fmt: skip
    for w, m in med.items():
        print(f"{w:8s} {m['record_cpu_s'] * 1e3:8.1f} ms {m['publish_s'] * 1e3:6.1f} ms "
              f"{m['stall_s'] * 1e3:8.1f} ms {m['rss_rise_mb']:6.0f} MB "
              f"{m['heap_mb']:7.0f} MB")  # fmt: skip
    for k in ("record_cpu_s", "publish_s"):
        print(f"{k} spool / memory: {med['spool'][k] / med['memory'][k]:.3f}")
    out = {
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "rows": rows,
        "median": med,
    }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = asyncio.run(_main(args))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
