"""Apply's inverse DCT against the float matmul decode it must cost no more than 1.5× of.

`apply_cost(shapes, chunk, topk, peers, repeat)` builds, for every parameter shape, what
`Distro.apply` decodes (the mean of `peers` random 1-bit top-k payloads, with the real
`aggregate`), then times, interleaved in one process so machine load hits all alike, per
repetition over all parameters: `matmul` = `sign(decode(mean))` (fp32 matmuls, not
deterministic), `apply` = `decode_sign(mean)` (what apply runs: fp32 with a proven bound, exact
near zero) and `exact` = `decode_sign_exact(mean)`. Medians over `repeat` repetitions after a
warm-up. `apply`'s parts (float matmuls, bound, exact recomputation) come from its own clock.
Used by bench/distro_vs_adamw.py (`apply_over_matmul_decode`) and runnable alone:
`python bench/apply_cost.py [--preset small] [--repeat 7]`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def apply_cost(
    shapes: Sequence[tuple[int, ...]], chunk: int, topk: int, peers: int = 3, repeat: int = 7
) -> dict[str, Any]:
    import torch

    # bench/'s own payload maker (this directory is on sys.path for every bench script).
    from distro_apply_determinism import mean_of_peers
    from psyche.distro import decode, decode_sign
    from psyche.distro.dct import decode_sign_exact, decode_sign_many
    from psyche.distro.sign_bound import fast_decode_sign_many

    gen = torch.Generator().manual_seed(0)
    inputs = [mean_of_peers(shape, chunk, topk, peers, gen, "cpu") for shape in shapes]
    for x, fast in zip(inputs, decode_sign_many(inputs), strict=True):  # warm-up, and the check
        if not torch.equal(fast, decode_sign_exact(x)) or not torch.equal(decode_sign(x), fast):
            raise AssertionError("decode_sign differs from decode_sign_exact")

    def timed(fn: Callable[[torch.Tensor], torch.Tensor]) -> float:
        t0 = time.process_time()
        for x in inputs:
            fn(x)
        return time.process_time() - t0

    runs: dict[str, list[float]] = {"matmul": [], "apply": [], "exact": []}
    part_runs: dict[str, list[float]] = {"float": [], "bound": [], "exact": []}
    undecided = elements = 0.0
    for _ in range(repeat):
        runs["matmul"].append(timed(lambda x: torch.sign(decode(x))))
        scratch = [x.clone() for x in inputs]  # apply overwrites its aggregates with the signs
        t0 = time.process_time()
        decode_sign_many(scratch, overwrite=True)
        runs["apply"].append(time.process_time() - t0)
        runs["exact"].append(timed(decode_sign_exact))
        parts: dict[str, float] = {}
        fast_decode_sign_many([x.clone() for x in inputs], parts, overwrite=True)
        for name in part_runs:
            part_runs[name].append(parts.get(name, 0.0))
        undecided, elements = parts["undecided"], parts["elements"]
    med = {name: statistics.median(v) for name, v in runs.items()}
    ratios = [a / m for a, m in zip(runs["apply"], runs["matmul"], strict=True)]
    return {
        "apply_over_matmul_decode": statistics.median(ratios),
        "exact_over_matmul_decode": statistics.median(
            e / m for e, m in zip(runs["exact"], runs["matmul"], strict=True)
        ),
        "seconds": med,
        "apply_parts_s": {name: statistics.median(v) for name, v in part_runs.items()},
        "undecided_fraction": undecided / max(elements, 1.0),
        "params": sum(int(torch.Size(s).numel()) for s in shapes),
        "repeat": repeat,
        "threads": torch.get_num_threads(),
    }


def preset_shapes(name: str) -> list[tuple[int, ...]]:
    """Parameter shapes of a training preset's Llama, from a model on the `meta` device."""
    import torch
    from transformers import LlamaForCausalLM

    from psyche.training import PRESETS, llama_config

    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(PRESETS[name]))
    return [tuple(p.shape) for _, p in sorted(model.named_parameters())]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--peers", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.peers < 1:
        ap.error("--repeat and --peers must be ≥ 1")
    import json

    from psyche.training import PRESETS

    if args.preset not in PRESETS:
        ap.error(f"--preset: unknown preset {args.preset!r} (known: {', '.join(PRESETS)})")
    out = apply_cost(preset_shapes(args.preset), args.chunk, args.topk, args.peers, args.repeat)
    print(json.dumps({"preset": args.preset, **out}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
