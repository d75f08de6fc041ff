"""How alike are honest DisTrO results of one round? Signed overlap per step against batch size.

The copy check (docs/protocol.md, "Near-duplicates") refuses a result whose signed overlap with a
held one reaches 0.75, and since the converged-round fix only if it is also twice as close to
that one as to a reference result of its round (`psyche.distro.overlap.CLOSER`). This bench
measures what honest results share: K clients (bench/distro_vs_adamw.py's pipeline: tiny preset,
synthetic corpus, sequence length 128, lag 2, the shipped DisTrO settings) train from one model,
each on its own slice of `--batch` samples per step; per step it prints the max / median / min
signed overlap over ordered pairs of different clients' results of that step, and the median
with other clients' results of the previous step (what the cross-round check compares).

Usage: `python bench/honest_overlap.py --batch 160 --steps 6` (about 1 min per step at 160 on one
core); `--json PATH` keeps the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=16, help="samples per client and step")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch  # after parsing: --help stays fast

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from rich.console import Console

    import distro_vs_adamw as base
    from psyche.data.local import LocalDataProvider
    from psyche.distro import Distro
    from psyche.distro.overlap import near_duplicate, repeated_tensors, signed_overlap
    from psyche.training import lr_for_step, prev_lr_for_step

    torch.set_num_threads(args.threads)
    cfg = base.BenchConfig(
        steps=args.steps, clients=args.clients, batch_per_client=args.batch, seq_len=128,
        val_samples=64, seed=0, lr_distro=3e-3, lr_adamw=3e-3, lag=2, evals=1, timing_warmup=0,
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ws = base.prepare_workspace(cfg, Path(tmp), Console(stderr=True))
        data = LocalDataProvider(ws.data_dir, cfg.seq_len)
        dcfg = base.distro_config(cfg)
        models = [base.load(ws) for _ in range(cfg.clients)]
        clients = [base.Client(m, Distro(m.named_parameters(), dcfg)) for m in models]
        schedule = cfg.schedule(cfg.lr_distro)
        pending: dict[int, list[Any]] = {}
        prev: list[Any] = []
        for step in range(cfg.steps):
            lr, prev_lr = lr_for_step(schedule, step), prev_lr_for_step(schedule, step)
            if step - cfg.lag in pending:
                applied = pending.pop(step - cfg.lag)
                for c in clients:
                    c.distro.apply(applied, lr)
            sent = []
            for c, batch in zip(clients, base.step_slices(cfg, step), strict=True):
                tokens = data.get_samples(batch)
                c.model.zero_grad(set_to_none=True)
                c.distro.lookahead(prev_lr)
                base.forward_backward(c.model, tokens, 1.0)
                p = c.distro.generate(lr, prev_lr, c.prev_self, step=step,
                                      batch_start=batch.start, batch_end=batch.end,
                                      trainer_nonce=c.nonce)  # fmt: skip
                c.prev_self, c.nonce = p, c.nonce + 1
                sent.append(p)
            pending[step] = sent
            same = [signed_overlap(a, b) for a, b in itertools.permutations(sent, 2)]
            cross = [
                signed_overlap(a, b)
                for i, a in enumerate(sent)
                for j, b in enumerate(prev)
                if i != j
            ]
            prev = sent
            # The copy check on honest results: (copy, original, reference) triples of three
            # different clients that the rule with a reference refuses, and ordered pairs with
            # a large tensor repeated exactly.
            triples = list(itertools.permutations(range(len(sent)), 3))
            refused = sum(near_duplicate(sent[a], sent[b], sent[r]) for a, b, r in triples)
            repeats = sum(bool(repeated_tensors(a, b)) for a, b in itertools.permutations(sent, 2))
            row = {
                "step": step, "lr": lr, "max": max(same), "median": statistics.median(same),
                "min": min(same),
                "previous_step_median": statistics.median(cross) if cross else None,
                "refused_triples": refused, "triples": len(triples), "repeat_pairs": repeats,
            }  # fmt: skip
            rows.append(row)
            xs = f"  vs previous step {row['previous_step_median']:.3f}" if cross else ""
            print(f"batch {args.batch:4d} step {step}  lr {lr:.2e}  max {row['max']:.3f}  "
                  f"median {row['median']:.3f}  min {row['min']:.3f}{xs}  refused "
                  f"{refused}/{len(triples)}  repeat pairs {repeats}", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"batch": args.batch, "clients": args.clients,
                                         "steps": rows}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
