"""Throughput of one client's train step with data and tensor parallelism, side by side.

Method. For each layout `DPxTP` (default: `1x1`, `{dp}x1` and `1x{tp}`), a fresh model of the chosen
preset (`psyche.training.PRESETS`, random weights, seed 0, bf16 on CUDA and fp32 on CPU:
`default_dtype`; a client holds its checkpoint's dtype) is trained with real DisTrO (config/tiny's
settings: chunk 64, top-k 8, 1-bit) through `build_trainer`, which gives a plain `Trainer` for 1x1
and a `ParallelTrainer` (worker processes, NCCL on CUDA, gloo on CPU) otherwise. Every step is a
full `train_step` (lookahead, weight sync to the workers, forward/backward over the batch's
micro-batches, gradient reduction, DisTrO compression) followed by an `apply_step` of its own
payload, as a client does each round. After `--warmup` steps, `--steps` steps are timed and the
median is reported as samples/s, and as samples/s per device (the figure that shows how well N
devices are used), with the speed-up over 1x1.

Random token batches of `--batch` samples of `--seq` tokens are split into micro-batches of
`--micro-batch-size` (DP needs at least DP micro-batches to have work for every replica).

This is meant for multi-GPU machines. It runs on CPU too, but there every rank shares the same
cores, so the figures say nothing about scaling there (use it as a smoke test).

Usage: `python bench/parallel_scaling.py [--preset small] [--device auto] [--dp 2] [--tp 2]
[--layouts 1x1,2x1,1x2,2x2] [--batch 16] [--micro-batch-size 4] [--seq N] [--steps 5]
[--warmup 1] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from psyche.distro import Distro, DistroConfig, decode_payload
from psyche.training import (
    PRESETS,
    build_trainer,
    default_dtype,
    init_model,
    llama_config,
    pick_device,
)

DISTRO = DistroConfig(
    compression_decay=0.999,
    compression_topk=8,
    compression_chunk=64,
    quantize_1bit=True,
    clip_grad_norm=1.0,
)
LR = 4e-4


def parse_layout(text: str) -> tuple[int, int]:
    dp, _, tp = text.lower().partition("x")
    try:
        return int(dp), int(tp)
    except ValueError:
        raise argparse.ArgumentTypeError(f"layout {text!r} is not DPxTP, e.g. 2x1") from None


def measure(args: argparse.Namespace, dp: int, tp: int) -> dict[str, float | int | str]:
    device = pick_device(args.device)
    preset = PRESETS[args.preset]
    model = init_model(llama_config(preset), 0, default_dtype(device))
    torch.nn.Module.to(model, device)
    distro = Distro(model.named_parameters(), DISTRO)
    trainer = build_trainer(
        model,
        distro,
        micro_batch_size=args.micro_batch_size,
        device=device,
        data_parallelism=dp,
        tensor_parallelism=tp,
    )
    seq = args.seq or preset.max_seq_len
    gen = torch.Generator().manual_seed(0)
    times: list[float] = []
    prev = None
    try:
        for step in range(1, args.warmup + args.steps + 1):
            batch = torch.randint(3, 259, (args.batch, seq), generator=gen)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started = time.perf_counter()
            out = trainer.train_step(
                batch,
                step=step,
                lr=LR,
                prev_lr=LR if prev is not None else 0.0,
                prev_self_results=prev,
                zero_optim=prev is None,
            )
            trainer.apply_step([decode_payload(out.payload, distro.payload_spec)], lr=LR)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if step > args.warmup:
                times.append(time.perf_counter() - started)
            prev = out.self_result
    finally:
        close = getattr(trainer, "close", None)
        if close is not None:
            close()
    seconds = statistics.median(times)
    return {
        "layout": f"{dp}x{tp}",
        "devices": dp * tp,
        "step_s": seconds,
        "samples_per_s": args.batch / seconds,
        "samples_per_s_per_device": args.batch / seconds / (dp * tp),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--dp", type=int, default=2, help="data parallelism to compare with 1")
    ap.add_argument("--tp", type=int, default=2, help="tensor parallelism to compare with 1")
    ap.add_argument("--layouts", type=lambda s: [parse_layout(x) for x in s.split(",")])
    ap.add_argument("--batch", type=int, default=16, help="samples per step")
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--seq", type=int, default=0, help="tokens per sample (default: preset's)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    layouts = args.layouts or [(1, 1), (args.dp, 1), (1, args.tp)]
    rows = [measure(args, dp, tp) for dp, tp in layouts]
    base = next((r for r in rows if r["layout"] == "1x1"), rows[0])
    print(
        f"preset {args.preset}, device {pick_device(args.device)}, batch {args.batch}×"
        f"{args.seq or PRESETS[args.preset].max_seq_len}, micro-batch {args.micro_batch_size}"
    )
    print(f"{'layout':>7} {'devices':>7} {'s/step':>8} {'samples/s':>10} {'per device':>10} "
          f"{'speed-up':>8} {'efficiency':>10}")  # fmt: skip
    for r in rows:
        speedup = float(r["samples_per_s"]) / float(base["samples_per_s"])
        r["speedup"] = speedup
        r["efficiency"] = speedup / int(r["devices"])
        print(
            f"{r['layout']:>7} {r['devices']:>7} {r['step_s']:>8.3f} {r['samples_per_s']:>10.2f} "
            f"{r['samples_per_s_per_device']:>10.2f} {speedup:>7.2f}x {r['efficiency']:>10.0%}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
