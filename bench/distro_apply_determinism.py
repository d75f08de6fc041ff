"""Cost of the deterministic apply-time inverse DCT: `decode_sign` against the float matmul.

Method. For each tensor set, the parameter shapes of a Llama model are taken from a model built on
the `meta` device (no weights): `tiny` is the 1.2 M-parameter preset that config/tiny and
config/tiny-solana train, `25m` a 25.5 M-parameter shape (hidden 512, MLP 2048, 6 layers, 8 heads,
byte vocabulary). The DisTrO settings are config/tiny's (chunk 64, top-k 8, 1-bit). For every
parameter the input is what `Distro.apply` decodes: the aggregated mean of `--peers` payloads
(default 3, config/tiny's client count), each choosing `k` random distinct coefficients per tile
with random ±1 values, built with the real `aggregate`. Timed per set, over all its parameters
(aggregation excluded, it is the same in both):

- `matmul`: `torch.sign(decode(mean))`, the apply of the code before this change (fp32 matmuls);
- `exact`: `decode_sign_exact(mean)`, the integer-grid evaluation in float64 (psyche.distro.dct);
- `fast`: `decode_sign(mean)`, what `Distro.apply` runs: the fp32 matmul pair with a proven error
  bound, exact evaluation only where the float value is within the bound (psyche.distro.sign_bound;
  it must equal `exact` bit for bit, which this bench checks on every input);
- `fixed-order` (unless `--no-fixed-order`): the other deterministic design considered, a float64
  sum of elementwise products in a fixed order, `acc = acc + basis[:, k]·coef[..., k]` for each `k`,
  along both tile axes; separate torch ops so nothing fuses into an FMA. It is exact-rule
  compatible but costs `h + w` full passes over the tensor per parameter.

Each figure is the median of `--repeat` runs (default 5) after one warm-up run that fills the basis
caches. `--threads` sets torch's intra-op threads (default: torch's own choice).

Usage: `python bench/distro_apply_determinism.py [--sets tiny,25m] [--peers 3] [--repeat 5]
[--threads N] [--device cpu|cuda] [--json out.json]`. Figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from psyche.distro import DistroResult, aggregate, dct_basis, decode, decode_sign, encoded_shape
from psyche.distro.compress import chunk_shape, totalk_of
from psyche.distro.dct import decode_sign_exact
from psyche.protocol.model import LLM
from psyche.protocol.optimizers import DistroOptimizer
from psyche.protocol.run_file import load_run_config
from psyche.training import PRESETS, Preset, llama_config

ROOT = Path(__file__).resolve().parents[1]
SETS: dict[str, Preset] = {
    "tiny": PRESETS["tiny"],
    "25m": Preset(
        hidden_size=512, intermediate_size=2048, num_layers=6, num_heads=8, max_seq_len=512
    ),
}


def shapes_of(preset: Preset) -> list[tuple[str, tuple[int, ...]]]:
    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(preset))
    return sorted((name, tuple(p.shape)) for name, p in model.named_parameters())


def mean_of_peers(
    shape: tuple[int, ...], chunk: int, topk: int, peers: int, gen: torch.Generator, device: str
) -> torch.Tensor:
    xshape = encoded_shape(shape, chunk)
    grid, totalk = chunk_shape(xshape), totalk_of(xshape)
    k = min(topk, totalk)
    results = []
    for _ in range(peers):
        idx = torch.rand(*grid, totalk, generator=gen).topk(k, dim=-1).indices
        val = torch.randint(0, 2, (*grid, k), generator=gen).float() * 2 - 1
        results.append(DistroResult(idx, val, xshape, totalk))
    return aggregate(results, torch.float32, torch.device(device), distinct=True)


def fixed_order_sign(encoded: torch.Tensor) -> torch.Tensor:
    """sign of the inverse DCT as an explicit float64 sum over k, k = 0, 1, … along each axis."""

    def along_last(x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-1]
        basis = dct_basis(size, torch.float64, x.device)
        acc = torch.zeros_like(x)
        for k in range(size):
            acc = acc + basis[:, k] * x[..., k : k + 1]
        return acc

    x = encoded.to(torch.float64)
    if x.ndim == 2:
        return torch.sign(along_last(x)).reshape(-1)
    *lead, ny, nx, h, w = x.shape
    y = along_last(x)  # over w' → w
    z = along_last(y.transpose(-1, -2)).transpose(-1, -2)  # over h' → h
    return torch.sign(z).transpose(-3, -2).reshape(*lead, ny * h, nx * w)


def matmul_sign(encoded: torch.Tensor) -> torch.Tensor:
    return torch.sign(decode(encoded))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_all(
    fn: Callable[[torch.Tensor], torch.Tensor], inputs: list[torch.Tensor], repeat: int, device: str
) -> float:
    for x in inputs:  # warm-up: basis caches, allocator
        fn(x)
    sync(device)
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for x in inputs:
            fn(x)
        sync(device)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="tiny,25m")
    ap.add_argument("--peers", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-fixed-order", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    run = load_run_config(ROOT / "config" / "tiny" / "state.toml")
    assert isinstance(run.model, LLM) and isinstance(run.model.optimizer, DistroOptimizer)
    chunk, topk = run.model.optimizer.compression_chunk, run.model.optimizer.compression_topk
    print(
        f"device {args.device}, {torch.get_num_threads()} threads, chunk {chunk}, top-k {topk}, "
        f"{args.peers} peers, median of {args.repeat}"
    )
    header = (
        f"{'set':>5} {'params':>11} {'tensors':>7} {'matmul ms':>10} {'exact ms':>9} {'ratio':>6}"
        f" {'fast ms':>8} {'ratio':>6}"
    )
    if not args.no_fixed_order:
        header += f" {'fixed-order ms':>14} {'ratio':>6}"
    print(header)
    rows = []
    for name in args.sets.split(","):
        shapes = shapes_of(SETS[name])
        gen = torch.Generator().manual_seed(0)
        inputs = [mean_of_peers(s, chunk, topk, args.peers, gen, args.device) for _, s in shapes]
        for x in inputs:  # the new decode must agree with the old one away from exact ties
            exact, old = decode_sign_exact(x), matmul_sign(x)
            assert (exact != old).float().mean() < 1e-4, name
            assert torch.equal(decode_sign(x), exact), name
        row = {
            "set": name,
            "params": sum(int(torch.Size(s).numel()) for _, s in shapes),
            "tensors": len(shapes),
            "matmul_s": time_all(matmul_sign, inputs, args.repeat, args.device),
            "exact_s": time_all(decode_sign_exact, inputs, args.repeat, args.device),
            "fast_s": time_all(decode_sign, inputs, args.repeat, args.device),
        }
        row["ratio"] = row["exact_s"] / row["matmul_s"]
        row["fast_ratio"] = row["fast_s"] / row["matmul_s"]
        line = (
            f"{name:>5} {row['params']:>11,} {row['tensors']:>7} {row['matmul_s'] * 1e3:>10.1f} "
            f"{row['exact_s'] * 1e3:>9.1f} {row['ratio']:>6.2f} {row['fast_s'] * 1e3:>8.1f} "
            f"{row['fast_ratio']:>6.2f}"
        )
        if not args.no_fixed_order:
            row["fixed_order_s"] = time_all(fixed_order_sign, inputs, 1, args.device)
            row["fixed_order_ratio"] = row["fixed_order_s"] / row["matmul_s"]
            line += f" {row['fixed_order_s'] * 1e3:>14.1f} {row['fixed_order_ratio']:>6.1f}"
        print(line, flush=True)
        rows.append(row)
    if args.json:
        args.json.write_text(
            json.dumps({"threads": torch.get_num_threads(), "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
