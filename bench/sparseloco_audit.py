"""Does replaying one committed inner step catch SparseLoCo free riders, and at what cost?

Issue 39 item 2, the audit core (`psyche.training.sparseloco_audit`; the protocol does not carry
it yet). A trainer's round leaves H + 1 committed inner states (weights, AdamW moments, step);
a verifier replays one seed-chosen link j (inner step j on the j-th inner batch of the
trainer's assigned samples) and compares its next state with the committed one (relative error
of the weights' step and of the moments), plus the encode link (payload and error buffers from
the committed states, exact). Beside each link, the probe of inner step 0 that the result
carries (`psyche.distro.audit_probe`, checked from the result alone when the trainer's states do
not come): rows `probe KIND`.

Method. byzantine.py's workspace (the tiny preset, a synthetic corpus, sequence length 128). One
honest client trains `--rounds` rounds of H = `--inner-steps` inner steps of `--batch` samples
(the product's `SparseLoCoTrainer`, 1 torch thread), beside shadows with their own inner state
on the same start weights, each reporting the same batch: `fr2`/`fr4`/`fr8` train every inner
step on the first ½, ¼, ⅛ of that step's samples (at least one) repeated to fill it, `repeat`
on the round's first sample, `lazy1` honestly but for one inner step (the round's last) done as
`fr8`, `swamp` with no gradient at all from moments that round any gradient away
(:func:`swamp`), `tilt` honestly from first moments it chose before its first round, three times
the clip bound in a direction of its own (:func:`tilt`). No outer step is applied (the start
weights stay; the states carry over between rounds), which keeps the comparison about the link,
not the run. Every link of every round is replayed at 1 thread; the honest trainer's also at 2
threads (the calibration: honest error across thread counts). Per kind: the largest / smallest
error, the share of links caught at the tolerance (= detection per audit of one uniformly drawn
link), the audits needed for P(caught) ≥ 0.9, and the encode link's verdicts.

Usage: `python bench/sparseloco_audit.py` (8 rounds of H = 4, about 2 min on 2 loaded cores);
`--json PATH` keeps every link's errors; `--vocab 32000` trains a model whose embedding has
32,000 rows instead of 264, the corpus spread over it by byte pairs, so that most rows carry
moments from earlier steps and no gradient in the current one (their rounding counts against
the gradient-hidden check's honest share).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KINDS = ("honest", "fr2", "fr4", "fr8", "repeat", "lazy1", "swamp", "tilt")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--inner-steps", type=int, default=4, help="H")
    p.add_argument("--batch", type=int, default=4, help="samples per inner step")
    p.add_argument("--lr-inner", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="the weights' dtype (a run's clients hold its checkpoint's)",
    )
    p.add_argument(
        "--rounding-ulps",
        type=float,
        default=None,
        help="the rounding allowance of a short dtype's compare "
        "(psyche.training.audit_compare.ROUNDING_ULPS; default: the product's)",
    )
    p.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="an embedding of this many rows instead of the byte vocabulary's 264, the corpus "
        "spread over it by byte pairs (most rows then hold moments but no gradient in a step)",
    )
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--kernels",
        default="default",
        help="ATEN_CPU_CAPABILITY of the second verifier process ('' to skip)",
    )
    p.add_argument("--replay-dir", type=Path, help=argparse.SUPPRESS)  # the second process
    p.add_argument("--report", type=Path, help="print the tables of a --json file and stop")
    args = p.parse_args(argv)
    if args.rounding_ulps is not None and args.rounding_ulps < 0:
        p.error("--rounding-ulps must be ≥ 0")
    if args.rounds < 1 or args.inner_steps < 1 or args.batch < 1:
        p.error("--rounds, --inner-steps and --batch must be ≥ 1")
    if args.vocab is not None and args.vocab < 264:
        p.error("--vocab must be ≥ 264 (the byte vocabulary)")
    return args


def cheap(kind: str, parts: list[Any], rnd_first: Any) -> list[Any]:
    """The inner batches a shadow of `kind` trains on, each the shape of the honest one."""

    def shrink(part: Any, s: int) -> Any:
        kept = part[: max(1, part.shape[0] // s)]
        reps = math.ceil(part.shape[0] / kept.shape[0])
        return kept.repeat(reps, 1)[: part.shape[0]]

    if kind in ("honest", "swamp", "tilt"):  # swamp's backward computes nothing anyway
        return parts
    if kind == "repeat":
        return [rnd_first.expand(p.shape[0], -1).contiguous() for p in parts]
    if kind == "lazy1":
        return [*parts[:-1], shrink(parts[-1], 8)]
    s = {"fr2": 2, "fr4": 4, "fr8": 8}[kind]
    return [shrink(p, s) for p in parts]


def tilt(trainer: Any, seed: int) -> None:
    """The `tilt` shadow: before its first round (an epoch's first, when no earlier result
    binds them), first moments of norm 3 × the clip bound in a direction it picks (random
    here), second moments their squares (so the first update is that direction's sign), then
    honest work. Every replay from its states holds; what tells is their size
    (``audit_compare.moment_scale``), until the moments decay into the bound."""
    import torch

    g = torch.Generator().manual_seed(seed + 7)
    m = [torch.randn(p.shape, generator=g) for p in trainer.params]
    norm = math.sqrt(sum(float(x.double().square().sum()) for x in m))
    size = 3.0 * trainer.config.clip_grad_norm / norm
    for p, x in zip(trainer.params, m, strict=True):
        trainer._inner.state[p] = {
            "step": torch.tensor(100.0),
            "exp_avg": (size * x).to(p.dtype),
            "exp_avg_sq": (size * x).square().to(p.dtype),
        }


def swamp(trainer: Any, seed: int) -> None:
    """The `swamp` shadow: inner moments a million times an honest one's, in a direction it
    picks (here random), and no forward or backward at all (a zero gradient). AdamW then rounds
    any gradient away, so a replay from its states lands where it committed, gradient or not:
    every link and probe passed before the hidden-gradient check (2026-12-06)."""
    import torch

    g = torch.Generator().manual_seed(seed + 99)
    for p in trainer.params:
        trainer._inner.state[p] = {
            "step": torch.tensor(100.0),
            "exp_avg": (1e8 * torch.randn(p.shape, generator=g)).to(p.dtype),
            "exp_avg_sq": torch.full(p.shape, 1e16, dtype=p.dtype),
        }

    def no_work(batch: Any, cancel: Any) -> float:
        for p in trainer.params:
            p.grad = torch.zeros_like(p)
        return 0.0

    trainer._backward = no_work


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from rich.console import Console

    import distro_vs_adamw as base
    from psyche.data.local import LocalDataProvider
    from psyche.distro.audit_probe import encode_probe, probe_positions
    from psyche.protocol.optimizers import SparseLoCoOptimizer
    from psyche.training import lr_for_step
    from psyche.training import sparseloco_audit as audit
    from psyche.training.sparseloco_probe import replay_probe
    from psyche.training.sparseloco_trainer import SparseLoCoTrainer

    torch.set_num_threads(1)
    console = Console(stderr=True)
    h = args.inner_steps
    cfg = base.BenchConfig(
        steps=args.rounds * h, clients=1, batch_per_client=args.batch, seq_len=128,
        val_samples=8, seed=args.seed, lr_distro=3e-3, lr_adamw=3e-3, lag=2, evals=1,
        timing_warmup=0,
    )  # fmt: skip
    opt = _optimizer(SparseLoCoOptimizer, h)
    keys = (*KINDS, "honest@2", *(f"probe {k}" for k in KINDS), "probe honest@2")
    links: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    saved: list[dict[str, Any]] = []
    encode_ok: dict[str, list[bool]] = {k: [] for k in KINDS}
    cost = {"train_s": 0.0, "record_s": 0.0, "replay_s": 0.0, "replays": 0, "state_bytes": 0}
    with tempfile.TemporaryDirectory() as tmp:
        ws = base.prepare_workspace(cfg, Path(tmp), console)
        data = LocalDataProvider(ws.data_dir, cfg.seq_len)
        if args.vocab is None:
            model_dir, model = ws.model_dir, base.load(ws)
        else:
            model_dir = wide_model(args, Path(tmp))
            model = _load(model_dir)
        model = model.to(getattr(torch, args.dtype))
        trainers = {k: SparseLoCoTrainer(model, opt, micro_batch_size=args.batch) for k in KINDS}
        swamp(trainers["swamp"], args.seed)
        tilt(trainers["tilt"], args.seed)
        verifier = SparseLoCoTrainer(model, opt, micro_batch_size=args.batch)
        shapes = list(verifier.shapes)
        numels = [math.prod(s) for s in shapes]
        schedule = cfg.schedule(args.lr_inner)
        for rnd in range(args.rounds):
            steps = range(rnd * h, (rnd + 1) * h)
            parts = [spread(data.get_samples(base.step_slices(cfg, s)[0]), args.vocab)
                     for s in steps]  # fmt: skip
            batch = torch.cat(parts)
            lr = lr_for_step(schedule, rnd * h)
            for kind, t in trainers.items():
                trained = torch.cat(cheap(kind, parts, batch[:1]))
                t0 = time.process_time()
                out_plain = None
                if kind == "honest":  # the cost of recording, side by side with a plain round
                    probe = SparseLoCoTrainer(model, opt, micro_batch_size=args.batch)
                    out_plain = probe.train_round(trained, step=rnd, lr=lr)
                    cost["train_s"] += time.process_time() - t0
                    t0 = time.process_time()
                at = probe_positions(shapes, rnd)
                trail = audit.AuditTrail(probe_at=at)
                out = t.train_round(trained, step=rnd, lr=lr, trail=trail)
                if out_plain is not None:
                    cost["record_s"] += time.process_time() - t0
                    cost["state_bytes"] = len(trail.states[0])
                probe = trail.probe()
                if kind == "honest":
                    wire = torch.frombuffer(bytearray(encode_probe(probe)), dtype=torch.uint8)
                    saved.append({"states": trail.states, "parts": parts, "lr": lr,
                                  "probe": wire, "step": rnd})  # fmt: skip
                for n in (1, 2) if kind == "honest" else (1,):
                    torch.set_num_threads(n)
                    v = replay_probe(verifier, probe, at, parts[0], lr)
                    key = f"probe {kind}" if n == 1 else f"probe {kind}@{n}"
                    links[key].append(_row(v, rnd))
                torch.set_num_threads(1)
                for j in range(h):
                    start = verifier.params if j == 0 else None
                    before = audit.decode_state(trail.states[j], shapes, trail.hashes[j],
                                                start=start)  # fmt: skip
                    after = audit.decode_state(trail.states[j + 1], shapes, trail.hashes[j + 1])
                    threads = (1, 2) if kind == "honest" else (1,)
                    for n in threads:
                        torch.set_num_threads(n)
                        t0 = time.process_time()
                        v = audit.replay_link(verifier, j, before, after, parts[j], lr)
                        cost["replay_s"] += time.process_time() - t0
                        cost["replays"] += 1
                        key = kind if n == 1 else f"{kind}@{n}"
                        links[key].append(_row(v, rnd))
                    torch.set_num_threads(1)
                last = audit.decode_state(trail.states[h], shapes, trail.hashes[h])
                e0, e1 = (audit.decode_error(d, numels) for d in trail.errors)
                encode_ok[kind].append(audit.replay_encode(verifier, e0, last, out.payload, e1))
            console.print(f"round {rnd + 1}/{args.rounds} done", highlight=False)
        if args.kernels:
            again = other_kernels(model_dir, saved, args, Path(tmp))
            links[f"honest@{args.kernels}"] = [r for r in again if not r.get("probe")]
            links[f"probe honest@{args.kernels}"] = [r for r in again if r.get("probe")]
    from psyche.training import audit_compare

    return {"links": links, "encode_ok": encode_ok, "cost": cost, "h": h,
            "tolerance": audit.TOLERANCE, "dtype": args.dtype, "vocab": args.vocab or 264,
            "rounding_ulps": audit_compare.ROUNDING_ULPS}  # fmt: skip


def wide_model(args: argparse.Namespace, tmp: Path) -> Path:
    """The tiny preset with an embedding of ``--vocab`` rows, written where a second process
    loads it too."""
    from psyche.training import init_model, llama_config
    from psyche.training.presets import PRESETS

    out = tmp / f"model-vocab-{args.vocab}"
    init_model(llama_config(PRESETS["tiny"], args.vocab), args.seed).save_pretrained(out)
    return out


def _load(model_dir: Path) -> Any:
    import torch

    from psyche.training import load_model

    return load_model(str(model_dir), device=torch.device("cpu"), dtype=torch.float32)[0]


def spread(tokens: Any, vocab: int | None) -> Any:
    """Byte tokens as ids of a ``vocab``-row embedding: each the pair (previous byte, byte)
    modulo ``vocab``, so the ids follow text's skewed pair frequencies, and a step's batch
    touches a few hundred rows of tens of thousands (as a real tokenizer's would)."""
    if vocab is None:
        return tokens
    prev = tokens.roll(1, dims=1)
    prev[:, 0] = tokens[:, 0]
    return (prev * 264 + tokens) % vocab


def other_kernels(
    model_dir: Path, saved: list[dict[str, Any]], args: argparse.Namespace, tmp: Path
) -> list[dict[str, Any]]:
    """Replay the honest trails in a second process on another CPU kernel set."""
    import os
    import subprocess

    import torch

    torch.save(saved, tmp / "trails.pt")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": args.kernels}
    cmd = [sys.executable, __file__, "--replay-dir", str(tmp), "--inner-steps",
           str(args.inner_steps), "--batch", str(args.batch), "--dtype", args.dtype]  # fmt: skip
    if args.rounding_ulps is not None:
        cmd += ["--rounding-ulps", str(args.rounding_ulps)]
    subprocess.run(cmd, check=True, env=env,
                   input=str(model_dir), text=True)  # fmt: skip
    out: list[dict[str, Any]] = json.loads((tmp / "replayed.json").read_text())
    return out


def replay_saved(args: argparse.Namespace) -> int:
    """The second process: replay every link of the saved honest trails on this kernel set."""
    import torch

    from psyche.distro.audit_probe import decode_probe, probe_positions
    from psyche.protocol.optimizers import SparseLoCoOptimizer
    from psyche.training import load_model
    from psyche.training import sparseloco_audit as audit
    from psyche.training.sparseloco_probe import replay_probe
    from psyche.training.sparseloco_trainer import SparseLoCoTrainer

    torch.set_num_threads(1)
    model_dir = sys.stdin.read().strip()
    model, _ = load_model(model_dir, device=torch.device("cpu"), dtype=torch.float32)
    model = model.to(getattr(torch, args.dtype))  # as the first process built it
    verifier = SparseLoCoTrainer(model, _optimizer(SparseLoCoOptimizer, args.inner_steps),
                                 micro_batch_size=args.batch)  # fmt: skip
    shapes = list(verifier.shapes)
    rows = []
    for rnd, r in enumerate(torch.load(args.replay_dir / "trails.pt", weights_only=True)):
        for j in range(len(r["parts"])):
            before = audit.decode_state(r["states"][j], shapes,
                                        start=verifier.params if j == 0 else None)  # fmt: skip
            after = audit.decode_state(r["states"][j + 1], shapes)
            v = audit.replay_link(verifier, j, before, after, r["parts"][j], r["lr"])
            rows.append(_row(v, rnd))
        probe = decode_probe(bytes(r["probe"].numpy()), shapes)
        at = probe_positions(shapes, int(r["step"]))
        v = replay_probe(verifier, probe, at, r["parts"][0], r["lr"])
        rows.append({**_row(v, rnd), "probe": True})
    (args.replay_dir / "replayed.json").write_text(json.dumps(rows))
    return 0


def _row(v: Any, rnd: int) -> dict[str, Any]:
    """One replayed link's (or probe's) verdict, as the JSON keeps it."""
    return {"round": rnd, "link": v.link, "weight": v.weight_error, "moment": v.moment_error,
            "hidden": v.hidden, "scale": v.moments_scale, "ok": v.ok}  # fmt: skip


def _optimizer(cls: Any, h: int) -> Any:
    return cls(
        betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8, clip_grad_norm=1.0, inner_steps=h,
        outer_lr=1.0, outer_momentum=0.0, topk_chunk=4096, topk=32, value_bits=2,
        error_decay=0.95,
    )  # fmt: skip


def report(res: dict[str, Any]) -> None:
    import statistics

    tol = res["tolerance"]
    print(f"tolerance {tol:g}; H = {res['h']}; vocabulary {res.get('vocab', 264):,}; "
          f"{res.get('dtype', 'float32')} weights "
          f"(rounding allowance {res.get('rounding_ulps', 0):g} ulp where shorter than float32); "
          "a link's error = max(weight, moment) error")  # fmt: skip
    print("| kind | links | link error min / median / max | gradient hidden min / max "
          "| moments / clip bound max | caught per audit | audits for P ≥ 0.9 "
          "| encode link ok |")  # fmt: skip
    print("|---|---:|---|---|---:|---:|---:|---|")
    for kind, rows in res["links"].items():
        if not rows:
            continue
        e = [max(r["weight"], r["moment"]) for r in rows]
        p = sum(not r["ok"] for r in rows) / len(rows)
        need = (
            "—" if p == 0 else ("1" if p == 1 else str(math.ceil(math.log(0.1) / math.log(1 - p))))
        )
        enc = res["encode_ok"].get(kind)
        enc_s = f"{sum(enc)}/{len(enc)}" if enc else "—"
        hid = [r.get("hidden", math.nan) for r in rows]
        scale = max(r.get("scale", math.nan) for r in rows)
        print(f"| {kind} | {len(rows)} | {min(e):.2e} / {statistics.median(e):.2e} / "
              f"{max(e):.2e} | {min(hid):.2e} / {max(hid):.2e} | {scale:.3g} | {p:.0%} "
              f"| {need} | {enc_s} |")  # fmt: skip
    c = res["cost"]
    rounds = len(res["encode_ok"]["honest"])
    per_link = c["replay_s"] / max(c["replays"], 1)
    per_round = c["train_s"] / max(rounds, 1)
    print(f"CPU s: a plain honest round {per_round:.3f}; the same round recording its trail "
          f"{c['record_s'] / max(rounds, 1):.3f} ({c['record_s'] / max(c['train_s'], 1e-9):.2f}×); "
          f"one link's replay {per_link:.3f} ({per_link / max(per_round, 1e-9):.2f} of a round); "
          f"a state blob {c['state_bytes']:,} bytes")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.rounding_ulps is not None:
        from psyche.training import audit_compare

        audit_compare.ROUNDING_ULPS = args.rounding_ulps
    if args.replay_dir is not None:
        return replay_saved(args)
    if args.report is not None:
        report(json.loads(args.report.read_text()))
        return 0
    res = run(args)
    report(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
