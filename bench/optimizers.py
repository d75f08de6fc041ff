"""AdamW data-parallel vs DisTrO vs SparseLoCo on the same token stream, at equal tokens.

Method. One process builds a Llama preset (`--preset`, `write_model_dir`, seed `--seed`) and a
synthetic byte corpus (`synth_corpus` → `prepare_corpus`, `--seq-len`-token samples); the last
`--val-samples` samples are held out. Global step `t` trains the samples `[t·B, (t+1)·B)`,
`B = clients × batch-per-client`, cut into one slice per client by `get_batch_ids_for_round`.
Every arm sees exactly these tokens from the same weights with the same cosine LR shape
(`distro_vs_adamw.BenchConfig.schedule`) and gradient clip 1.0:

- adamw: one model, the mean of the K slices' gradients (a K-way all-reduce), AdamW (0.9, 0.95).
- distro: K clients with `Distro` (chunk 64, top-k 8, 1-bit, decay 0.999), apply lag 2 (the
  protocol's pipeline); each client decodes (v2) and applies all K payloads.
- sparseloco: K clients, each with its own inner AdamW (0.9, 0.95; its state stays local); a
  round is H = `--inner-steps` global steps: each client takes its slice of each of those steps
  as one inner step, then `encode_round` (error feedback, chunked top-k, b-bit values), every
  client decodes all K payloads and `outer_apply`s them to the round's start weights (no lag
  here: the outer step lands before the next round; the daemon's lag is C30's integration).
  Bytes per token: one payload per H inner steps.

The clients are simulated one after another in one process; their weights are hashed at every
evaluation and must agree (DisTrO and SparseLoCo), else the run aborts. Codec time is per client:
DisTrO's lookahead + generate + encode + decode of K + apply per step; SparseLoCo's encode_round
+ decode of K + outer_apply per round. `codec_fraction_of_fwd_bwd` puts SparseLoCo's codec per
round against the forward+backward of `--codec-samples` samples (16 in the issue) measured on the
same model, i.e. a round whose per-client batch is that many samples; `codec_fraction_of_round`
puts it against the run's own round (H inner steps of `--batch-per-client` samples).

The default learning rates are the best of the sweep on `small` at 1,008 steps (bench/README.md,
"Learning-rate sweep on `small`"): AdamW 1.5e-3, DisTrO 7.5e-4, SparseLoCo inner 7.5e-4 with
outer LR 4.

Usage: `python bench/optimizers.py --quick --json out.json` (tiny, 240 steps); the issue's run:
`python bench/optimizers.py --preset small --steps 1000 --json small.json` (hours on two cores).
Figures and verdicts: bench/README.md, "AdamW vs DisTrO vs SparseLoCo".
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="tiny preset, 240 steps (< 15 min)")
    p.add_argument("--preset", help="model preset (default small; tiny with --quick)")
    p.add_argument("--steps", type=int, help="global steps (default 1000; 240 with --quick)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--batch-per-client", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--val-samples", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--evals", type=int, default=4)
    p.add_argument("--lr-adamw", type=float, default=1.5e-3)
    p.add_argument("--lr-distro", type=float, default=7.5e-4)
    p.add_argument("--lr-inner", type=float, default=7.5e-4, help="SparseLoCo inner AdamW LR")
    p.add_argument("--inner-steps", type=int, default=16, help="SparseLoCo H")
    p.add_argument("--topk-chunk", type=int, default=4096)
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--value-bits", type=int, default=2, choices=(1, 2))
    p.add_argument("--error-decay", type=float, default=0.95)
    p.add_argument("--outer-lr", type=float, default=4.0)
    p.add_argument("--outer-momentum", type=float, default=0.0)
    p.add_argument(
        "--outer-lr-final",
        type=float,
        help="SparseLoCo: the outer LR falls with the cosine to this (default: constant)",
    )
    p.add_argument(
        "--final-lr-fraction",
        type=float,
        default=0.1,
        help="every arm's final LR as a fraction of its base LR (the cosine's floor)",
    )
    p.add_argument(
        "--error-lr-scale",
        action="store_true",
        help="SparseLoCo: scale the error buffers by the inner LR's fall since the last round",
    )
    p.add_argument("--codec-samples", type=int, default=16, help="per-client round batch")
    p.add_argument("--arms", default="adamw,distro,sparseloco")
    p.add_argument("--apply-repeat", type=int, default=5)
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    args.preset = args.preset or ("tiny" if args.quick else "small")
    args.steps = args.steps or (240 if args.quick else 1000)
    args.arms = tuple(a for a in args.arms.split(",") if a)
    for a in args.arms:
        if a not in ("adamw", "distro", "sparseloco"):
            p.error(f"--arms: unknown arm {a!r}")
    if args.steps % args.inner_steps:
        p.error("--steps must be a multiple of --inner-steps (whole rounds)")
    if not 0.0 <= args.final_lr_fraction < 1.0:
        p.error("--final-lr-fraction must be in [0, 1)")
    if args.outer_lr_final is not None and not args.outer_lr_final > 0:
        p.error("--outer-lr-final must be > 0")
    for name in ("steps", "clients", "batch_per_client", "inner_steps", "evals"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be ≥ 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Heavy imports after the arguments parse (a bad flag answers at once).
    import torch
    import transformers
    from rich.console import Console

    import optimizer_arms as arms  # bench/, this script's directory

    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers.utils.logging.disable_progress_bar()
    console = Console()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="psyche-bench-opt-") as tmp:
        run = arms.setup(args, Path(tmp), console)
        results: dict[str, Any] = {}
        for name in args.arms:
            console.print(f"arm {name}")
            results[name] = getattr(arms, f"run_{name}")(run, console)
        fwd16 = arms.fwd_bwd_seconds(run, args.codec_samples)
    apply = arms.apply_cost_figures(args)
    fig = arms.figures(args, run, results, fwd16, apply, time.perf_counter() - started)
    arms.report(fig, console)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(fig, indent=2) + "\n")
        console.print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    from psyche.cli.process_exit import exit_now

    # Without the interpreter's teardown (2-4 s of collecting torch's heap; every temporary
    # directory is a ``with`` block, already removed), as the console scripts end.
    exit_now(main())
