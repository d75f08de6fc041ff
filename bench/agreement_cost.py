"""The apply's agreement filter (`psyche.distro.agreement.opposed`) against the apply itself.

For a preset's Llama, builds K DisTrO payloads the way trainers do (`Distro.generate`, through
the wire format) from gradients that share a direction (a common random gradient plus as much
noise of each trainer's own, so that results agree on balance, as honest ones do), and times,
interleaved in one process on one thread (CPU time, medians over `--repeat`), `opposed` on that
round (one look), `opposed` on it with one result's signs flipped (two looks) and
`Distro.apply`, for each K of `--peers`. Prints per K the seconds of each, the filter's over
the apply's and the filter's microseconds per result (falling towards a constant as K grows:
a pass over each tensor's buffer, then a scatter and a gather per result; no loop over pairs).

    python bench/agreement_cost.py [--preset small] [--peers 4,16,64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any


def measure(preset: str, peers: Sequence[int], repeat: int, chunk: int, topk: int) -> list[Any]:
    """The rows (also printed as they come), on one torch thread; the caller's count restored."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(preset, peers, repeat, chunk, topk)
    finally:
        torch.set_num_threads(threads)


def _measure(preset: str, peers: Sequence[int], repeat: int, chunk: int, topk: int) -> list[Any]:
    import torch

    from byzantine_distro import flipped  # beside this file, not a package
    from psyche.distro import Distro, DistroConfig, decode_payload, encode_payload
    from psyche.distro.agreement import opposed
    from psyche.training import PRESETS, init_model, llama_config

    cfg = DistroConfig(compression_decay=0.999, compression_topk=topk, compression_chunk=chunk,
                       quantize_1bit=True)  # fmt: skip
    model = init_model(llama_config(PRESETS[preset]), seed=0)
    distro = Distro(model.named_parameters(), cfg)
    gen = torch.Generator().manual_seed(0)
    common = [torch.randn(p.shape, generator=gen) for p in model.parameters()]
    payloads = []
    for n in range(max(peers)):
        for p, c in zip(model.parameters(), common, strict=True):
            p.grad = c + torch.randn(p.shape, generator=gen)
        wire = distro.generate(1e-3, 1e-3, None, step=0, batch_start=n, batch_end=n + 1)
        payloads.append(decode_payload(encode_payload(wire), distro.payload_spec))
    rows = []
    for k in peers:
        honest = payloads[:k]
        attacked = [flipped(honest[0]), *honest[1:]]
        times: dict[str, list[float]] = {"honest": [], "flipped": [], "apply": []}
        for _ in range(repeat):
            for name, round_ in (("honest", honest), ("flipped", attacked), ("apply", honest)):
                t0 = time.process_time()
                out = distro.apply(round_, 1e-3) if name == "apply" else opposed(round_)
                times[name].append(time.process_time() - t0)
                if name != "apply" and out != ([] if name == "honest" else [0]):
                    raise AssertionError(f"{name} round of {k}: left out {out}")
        f, g, a = (statistics.median(times[n]) for n in ("honest", "flipped", "apply"))
        rows.append({"peers": k, "filter_s": round(f, 4), "filter_flipped_s": round(g, 4),
                     "apply_s": round(a, 4), "filter_over_apply": round(f / a, 4),
                     "filter_flipped_over_apply": round(g / a, 4),
                     "filter_us_per_result": round(f / k * 1e6, 1)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--peers", default="4,16,64", help="comma-separated round sizes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    args = ap.parse_args(argv)
    try:
        peers = [int(x) for x in args.peers.split(",")]
    except ValueError:
        ap.error("--peers: comma-separated integers, e.g. 4,16,64")
    if args.repeat < 1 or min(peers) < 1:
        ap.error("--repeat and every --peers value must be ≥ 1")
    from psyche.training import PRESETS

    if args.preset not in PRESETS:
        ap.error(f"--preset: unknown preset {args.preset!r} (known: {', '.join(PRESETS)})")
    measure(args.preset, peers, args.repeat, args.chunk, args.topk)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
