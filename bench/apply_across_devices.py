"""Same weights on every device: `Distro.apply` on CPU and CUDA, hashed, and its cost there.

Every honest client must hold bit-identical weights after each round, whatever its hardware
(docs/distro.md, "Fast path"). This bench applies the same consensus rounds to the same model on
each device it is given and hashes the weights after every round (`tensors_hash`); `--reference`
compares them with the hashes another machine (or torch version) wrote, so a CPU here and a GPU
elsewhere can be set side by side.

Inputs are made with numpy's PCG64 from uniform doubles only (`--seed`), whose stream does not
depend on the torch or numpy version, and their hash is printed: two runs whose input hashes match
applied the same payloads. Per preset (parameter shapes of its Llama, from a `meta` model, or the
reference file's): float32 weights uniform in ±0.02; per round, `--peers` 1-bit top-k payloads
(config/tiny's chunk 64, top-k 8) encoded with the wire format and decoded again, as a client
receives them; then the round's weight decay (0.1, through `Distro.cancel`, which applies what
`generate` would) and `Distro.apply` at a fixed learning rate. `--dtypes` runs it with the weights
in each dtype (a client holds bf16 on CUDA and fp32 on CPU, `psyche.training.device`). Timed per
device (wall clock, synchronised, median of the rounds after the first): the whole apply; the
aggregation of the payloads into dense means, which the apply does first, alone; and the float
matmul decode the exact sign replaces, `sign(decode(mean))`, from those means. The ratio printed
is the apply without its aggregation over that decode: `bench/apply_cost.py`'s ratio on that
device, except that it also holds the weight step itself and is wall time, not CPU time.

Usage: `python bench/apply_across_devices.py [--presets tiny,small] [--devices cpu,cuda]
[--rounds 4] [--reference other.json] [--json out.json]`. Figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

LR = 1e-3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--devices", default="cpu,cuda", help="comma list; cuda is skipped if absent")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="weights' dtypes (torch names)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--peers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--reference", type=Path, default=None, help="another run's --json")
    ap.add_argument("--json", type=Path, default=None)
    return ap.parse_args(argv)


def _shapes(preset: str) -> list[tuple[str, tuple[int, ...]]]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from distro_apply_determinism import shapes_of
    from psyche.training import PRESETS

    return shapes_of(PRESETS[preset])


def _inputs(shapes: list[tuple[str, tuple[int, ...]]], args: argparse.Namespace) -> Any:
    import numpy as np
    import torch

    from psyche.distro import Distro, DistroConfig, DistroResult
    from psyche.distro.payload import Payload, decode_payload, encode_payload

    cfg = DistroConfig(
        compression_decay=0.999,
        compression_topk=8,
        compression_chunk=64,
        quantize_1bit=True,
        weight_decay=0.1,
    )
    rng = np.random.Generator(np.random.PCG64(args.seed))
    params = {n: (rng.random(s) * 0.04 - 0.02).astype(np.float32) for n, s in shapes}
    spec = Distro(((n, torch.from_numpy(p)) for n, p in params.items()), cfg).payload_spec
    h = hashlib.sha256()
    rounds = []
    for r in range(args.rounds):
        wires = []
        for peer in range(args.peers):
            results = []
            for t in spec.tensors:
                grid = t.xshape[:-2] if len(t.xshape) > 2 else t.xshape[:-1]
                k = min(cfg.compression_topk, t.totalk)
                u = rng.random((*grid, t.totalk))
                idx = np.sort(np.argpartition(u, -k, axis=-1)[..., -k:], axis=-1)
                val = np.where(rng.random(idx.shape) < 0.5, -1.0, 1.0).astype(np.float32)
                results.append(
                    DistroResult(torch.from_numpy(idx), torch.from_numpy(val), t.xshape, t.totalk)
                )
            payload = Payload(step=r + 1, batch_start=peer, batch_end=peer + 1,
                              trainer_nonce=0, quantized=True, results=tuple(results))  # fmt: skip
            wire = encode_payload(payload)
            h.update(wire)
            wires.append(wire)
        rounds.append([decode_payload(w, spec) for w in wires])
    for n in sorted(params):
        h.update(params[n].tobytes())
    return cfg, params, rounds, h.hexdigest()


def run_device(device: str, dtype: str, cfg: Any, params: Any, rounds: Any) -> dict[str, Any]:
    import torch

    from psyche.distro import Distro, aggregate, decode
    from psyche.distro.compress import sign_values
    from psyche.training.hashing import tensors_hash

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    dt = getattr(torch, dtype)
    named = {n: torch.from_numpy(p.copy()).to(device=device, dtype=dt) for n, p in params.items()}
    distro = Distro(named.items(), cfg)
    hashes, apply_s, matmul_s, aggregate_s = [], [], [], []
    for payloads in rounds:
        sync()
        t0 = time.perf_counter()
        dense = []
        for i, name in enumerate(distro.names):
            res = [r.results[i] for r in payloads]
            res = [
                type(x)(x.idx, sign_values(x.val, torch.float32), x.xshape, x.totalk) for x in res
            ]
            dense.append(
                (
                    named[name].shape,
                    aggregate(res, torch.float32, torch.device(device), distinct=True),
                )
            )
        sync()
        aggregate_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for shape, x in dense:
            torch.sign(decode(x)).reshape(shape)
        sync()
        matmul_s.append(time.perf_counter() - t0)
        distro.cancel(LR)  # the round's decoupled weight decay, as a trainer applies it
        sync()
        t0 = time.perf_counter()
        distro.apply(payloads, LR)
        sync()
        apply_s.append(time.perf_counter() - t0)
        hashes.append(tensors_hash(named.items()))
    med = {k: statistics.median(v[1:] or v) for k, v in
           (("apply", apply_s), ("matmul", matmul_s), ("aggregate", aggregate_s))}  # fmt: skip
    out: dict[str, Any] = {
        "device": device,
        "dtype": dtype,
        "hashes": hashes,
        "apply_s": med["apply"],
        "aggregate_s": med["aggregate"],
        "matmul_decode_s": med["matmul"],
        # apply_cost.py's ratio: the apply without its aggregation, over the decode from the means
        "apply_over_matmul_decode": (med["apply"] - med["aggregate"]) / med["matmul"],
    }
    if device.startswith("cuda"):
        out["name"] = torch.cuda.get_device_name()
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    ref = json.loads(args.reference.read_text()) if args.reference else None
    devices = [d for d in args.devices.split(",") if d]
    if not torch.cuda.is_available():
        devices = [d for d in devices if not d.startswith("cuda")]
    report: dict[str, Any] = {"torch": torch.__version__, "presets": {}}
    ok = True
    for preset in [p for p in args.presets.split(",") if p]:
        if ref and preset in ref["presets"]:
            shapes = [(n, tuple(s)) for n, s in ref["presets"][preset]["shapes"]]
        else:
            shapes = _shapes(preset)
        cfg, params, rounds, input_hash = _inputs(shapes, args)
        entry: dict[str, Any] = {"shapes": shapes, "input_hash": input_hash, "runs": [],
                                 "params": sum(p.size for p in params.values())}  # fmt: skip
        print(f"{preset}: {entry['params']:,} parameters, inputs {input_hash[:12]}")
        theirs = ref["presets"].get(preset) if ref else None
        if theirs is not None and theirs["input_hash"] != input_hash:
            print(f"  reference (torch {ref['torch']}): inputs DIFFER, weights not compared")
            ok = False
            theirs = None
        for dtype in [d for d in args.dtypes.split(",") if d]:
            runs = [run_device(d, dtype, cfg, params, rounds) for d in devices]
            entry["runs"] += runs
            first = runs[0]["hashes"]
            same = all(r["hashes"] == first for r in runs)
            print(f"  {dtype}: " + ", ".join(
                f"{r['device']} apply {r['apply_s'] * 1e3:.1f} ms (aggregation "
                f"{r['aggregate_s'] * 1e3:.1f}), the rest {r['apply_over_matmul_decode']:.2f}× "
                "matmul decode" for r in runs
            ))  # fmt: skip
            print(f"    weights after each of {args.rounds} rounds identical across "
                  f"{'/'.join(devices)}: {same} (last {first[-1][:16]})")  # fmt: skip
            ok &= same
            other = [r for r in theirs["runs"] if r["dtype"] == dtype] if theirs else []
            if other:
                match = other[0]["hashes"] == first
                print(f"    and as the reference's {other[0]['device']} (torch {ref['torch']}): "
                      f"{match}")  # fmt: skip
                entry.setdefault("reference_match", {})[dtype] = match
                ok &= match
        report["presets"][preset] = entry
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
