"""Can a verifier tell from public data whether a SparseLoCo result was trained on its batch?

Issue 39 item 2. A SparseLoCo result is H inner AdamW steps from private moments and an error
buffer, so the DisTrO check (recompute one step's gradient, compare signs) does not apply. This
bench measures a check that needs only public data: **per-sample loss improvement**. The
verifier applies the judged payload alone to the round's start weights θ₀ (the outer step of a
one-payload round: public, and bit-identical everywhere) and measures, per sample x, the loss
drop d(x) = L(θ₀, x) − L(θ₀ − α·Δ̂, x). H inner steps on a sample fit the weights to it, so a
sample the trainer trained on should gain more than one it did not (Gauntlet's "own data against
random data", per sample instead of per batch). The reference distribution is the same drop on
**unassigned** samples: another trainer's samples of the same round (same distribution, not in
the judged result). No protocol change: it only measures.

Method. byzantine.py's workspace (the tiny preset, a synthetic corpus, sequence length 128). K
clients run SparseLoCo as `byzantine_sparseloco.run` (H inner steps of `--batch` samples each
per round, AdamW (0.9, 0.95), top-k chunk 4096 / top-32 / 2-bit / error decay 0.95, outer LR 1,
every client applying the K payloads). Client 0 also has **shadows** that never enter the
consensus, each with its own inner AdamW and error buffer on the same start weights:
`fr2`/`fr4`/`fr8` train on the first 1/2, 1/4, 1/8 of the round's samples, split into the same
H inner steps (reporting the whole batch), `repeat` on the round's first sample repeated, and
`copy` sends client 1's payload with 5 % of its signs flipped. Per round and judged result
(honest client 0 and each shadow), d(x) for every sample assigned to client 0 this round
(H·batch) and every sample assigned to client 1 (the unassigned reference U), at 1 torch
thread; every `--thread-every`-th round the honest result's drops are measured again at 2 threads.

Two statistics per assigned sample. `z`: z(x) = (d(x) − median d(U)) / MAD-scale(d(U)).
`zp` (paired): the same on r(x) = d(x) − o(x), where o(x) is the drop under the outer step of
the payloads of clients 2…K−1 (neither the judged trainer's nor U's owner's), which cancels how
much any update helps a given sample (one more forward per sample and round). For a verifier
that draws m assigned samples and accuses when the lowest z is below τ, the table gives per
result kind the detection rate per vote at τ₀ = the lowest honest z over all rounds (0 false
accusations here) and the votes needed for P(eject) ≥ 0.9 with one vote per round.

Cost: 2 forwards per checked sample (θ₀ is shared by every judged result of the round), plus
the reference's 2 forwards per unassigned sample; a forward is about a third of a
forward+backward, so checking m assigned and m unassigned samples costs about 4m/3 of the
trainer's per-sample work, against its H·batch samples.

Usage: `python bench/sparseloco_verify.py` (24 rounds of H = 8, about 6 min on 2 loaded
cores); `--json PATH` keeps every drop.
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

SHADOWS = ("fr2", "fr4", "fr8", "repeat", "copy")
KINDS = ("honest", *SHADOWS)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--rounds", type=int, default=24)
    p.add_argument("--inner-steps", type=int, default=8, help="H")
    p.add_argument("--batch", type=int, default=2, help="samples per client and inner step")
    p.add_argument("--lr-inner", type=float, default=3e-3)
    p.add_argument("--outer-lr", type=float, default=1.0)
    p.add_argument("--topk-chunk", type=int, default=4096)
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--thread-every", type=int, default=4, help="0: never re-measure at 2")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.clients < 2 or args.inner_steps < 1 or args.batch < 1 or args.rounds < 2:
        p.error("need --clients ≥ 2, --rounds ≥ 2, --inner-steps and --batch ≥ 1")
    return args


class Trainer:
    """One SparseLoCo trainer's private state: its inner AdamW and its error buffer."""

    def __init__(self, params: list[Any], shapes: list[Any], settings: Any, lr: float) -> None:
        import torch

        from psyche.distro import sparseloco as sl

        self.params = params
        self.state = sl.SparseLoCoState(shapes, settings)
        self.inner = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)

    def round(self, model: Any, batches: list[Any], lrs: list[float], start: list[Any],
              rnd: int) -> bytes:  # fmt: skip
        """H inner steps on `batches` from `start`; returns the wire payload, weights restored."""

        import distro_vs_adamw as base
        from psyche.distro import clip_grad_norm_
        from psyche.distro import sparseloco as sl

        for toks, lr in zip(batches, lrs, strict=True):
            model.zero_grad(set_to_none=True)
            base.forward_backward(model, toks, 1.0)
            clip_grad_norm_(self.params, 1.0)
            for g in self.inner.param_groups:
                g["lr"] = lr
            self.inner.step()
        wire = sl.encode_round(self.state, start, self.params, step=rnd, nonce=0)
        restore(self.params, start)
        return wire


def cheap(kind: str, batches: list[Any]) -> list[Any]:
    """The inner batches a shadow of `kind` trains on instead of the round's `batches`: the
    first 1/s of the round's samples split into the same H steps (each step cheaper), or the
    round's first sample repeated to fill every step (`repeat`: the right amount, wrong data)."""
    import torch

    if kind == "repeat":
        return [b[:1].expand(b.shape[0], -1).contiguous() for b in batches]
    samples = torch.cat(batches)
    kept = samples[: max(1, samples.shape[0] // {"fr2": 2, "fr4": 4, "fr8": 8}[kind])]
    return list(torch.tensor_split(kept, min(len(batches), kept.shape[0])))


def per_sample_loss(model: Any, toks: Any) -> list[float]:
    """Each sample's mean token cross-entropy (one forward of the whole set)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=toks, use_cache=False).logits[:, :-1].float()
        target = toks[:, 1:]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none"
        )
        return loss.view(toks.shape[0], -1).mean(dim=1).tolist()


def restore(params: list[Any], start: list[Any]) -> None:
    """Puts the round's start weights back: every step that moves the weights (an inner round,
    an outer step to measure) ends with this, so the weights are θ₀ between them."""
    import torch

    with torch.no_grad():
        for p, s in zip(params, start, strict=True):
            p.copy_(s)


def drops(model: Any, params: list[Any], start: list[Any], payloads: list[Any], ctx: Any,
          toks: Any, base_loss: list[float]) -> list[float]:  # fmt: skip
    """d(x) for every sample of `toks`: the loss drop from θ₀ to θ₀ with the outer step of
    `payloads` applied (their mean)."""

    from psyche.distro import sparseloco as sl

    state, settings, outer_lr = ctx
    sl.outer_apply(params, payloads, state, settings, outer_lr)
    after = per_sample_loss(model, toks)
    restore(params, start)
    return [b - a for b, a in zip(base_loss, after, strict=True)]


def overlap(a: Any, b: Any, state: Any) -> tuple[float, float]:
    """(share of `a`'s kept entries that `b` keeps too, share of those with the same sign)."""
    import torch

    kept = same = shared = 0
    for i, groups in enumerate(state.groups):
        ia, va = a.tensors[i].flat(groups)
        ib, vb = b.tensors[i].flat(groups)
        hit = torch.isin(ia, ib)
        kept += int(ia.numel())
        shared += int(hit.sum())
        if hit.any():
            sorted_b, order = ib.sort()
            at = order[torch.searchsorted(sorted_b, ia[hit])]
            same += int((va[hit].sign() == vb[at].sign()).sum())
    return shared / max(1, kept), same / max(1, shared)


def robust_z(values: Sequence[float], ref: Sequence[float]) -> list[float]:
    import statistics

    med = statistics.median(ref)
    mad = statistics.median(abs(r - med) for r in ref) * 1.4826 or 1e-12
    return [(v - med) / mad for v in values]


def run(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch
    from rich.console import Console

    import byzantine_sparseloco as slb
    import distro_vs_adamw as base
    from psyche.data.local import LocalDataProvider
    from psyche.distro import sparseloco as sl
    from psyche.training import lr_for_step

    torch.set_num_threads(1)
    console = Console(stderr=True)
    h, k = args.inner_steps, args.clients
    cfg = base.BenchConfig(
        steps=args.rounds * h, clients=k, batch_per_client=args.batch, seq_len=128,
        val_samples=64, seed=args.seed, lr_distro=3e-3, lr_adamw=3e-3, lag=2, evals=1,
        timing_warmup=0,
    )  # fmt: skip
    settings = sl.SparseLoCoSettings(
        topk_chunk=args.topk_chunk,
        topk=args.topk,
        value_bits=2,
        error_decay=0.95,
        outer_momentum=0.0,
    )
    gen = np.random.default_rng(args.seed + 11)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ws = base.prepare_workspace(cfg, Path(tmp), console)
        data = LocalDataProvider(ws.data_dir, cfg.seq_len)
        model = base.load(ws)
        params = [p for _, p in sorted(model.named_parameters())]
        shapes = [tuple(p.shape) for p in params]
        ctx = (sl.SparseLoCoState(shapes, settings), settings, args.outer_lr)
        honest = [Trainer(params, shapes, settings, args.lr_inner) for _ in range(k)]
        shadows = {kind: Trainer(params, shapes, settings, args.lr_inner) for kind in SHADOWS
                   if kind != "copy"}  # fmt: skip
        schedule = cfg.schedule(args.lr_inner)
        t0 = time.perf_counter()
        for rnd in range(args.rounds):
            start = [p.detach().clone() for p in params]
            steps = range(rnd * h, (rnd + 1) * h)
            slices = [[data.get_samples(base.step_slices(cfg, s)[i]) for s in steps]
                      for i in range(k)]  # fmt: skip
            lrs = [lr_for_step(schedule, s) for s in steps]
            wires = [t.round(model, slices[i], lrs, start, rnd) for i, t in enumerate(honest)]
            decoded = [sl.decode_payload(w, shapes, settings) for w in wires]
            judged = {"honest": decoded[0]}
            for kind, t in shadows.items():
                batches = cheap(kind, slices[0])
                wire = t.round(model, batches, lrs[: len(batches)], start, rnd)
                judged[kind] = sl.decode_payload(wire, shapes, settings)
            judged["copy"] = slb.flipped(decoded[1], 0.05, gen)
            assigned, other = torch.cat(slices[0]), torch.cat(slices[1])
            base_a, base_u = per_sample_loss(model, assigned), per_sample_loss(model, other)
            row: dict[str, Any] = {"round": rnd}
            # The paired reference: the same drops under the outer step of the payloads of
            # clients 2…K−1 (neither the judged trainer's nor the unassigned samples' owner's),
            # which cancels how much any update helps a given sample.
            others = [p for i, p in enumerate(decoded) if i >= 2] or [decoded[1]]
            o_a = drops(model, params, start, others, ctx, assigned, base_a)
            o_u = drops(model, params, start, others, ctx, other, base_u)
            for kind, payload in judged.items():
                d_a = drops(model, params, start, [payload], ctx, assigned, base_a)
                d_u = drops(model, params, start, [payload], ctx, other, base_u)
                r_a = [a - b for a, b in zip(d_a, o_a, strict=True)]
                r_u = [a - b for a, b in zip(d_u, o_u, strict=True)]
                row[kind] = {"assigned": d_a, "unassigned": d_u, "z": robust_z(d_a, d_u),
                             "zp": robust_z(r_a, r_u)}  # fmt: skip
            if args.thread_every and rnd % args.thread_every == 0:
                torch.set_num_threads(2)
                b2a, b2u = per_sample_loss(model, assigned), per_sample_loss(model, other)
                d2a = drops(model, params, start, [judged["honest"]], ctx, assigned, b2a)
                d2u = drops(model, params, start, [judged["honest"]], ctx, other, b2u)
                torch.set_num_threads(1)
                z2 = robust_z(d2a, d2u)
                row["threads2_max_dz"] = max(
                    abs(a - b) for a, b in zip(z2, row["honest"]["z"], strict=True)
                )
            row["overlap"] = {
                "honest_0_1": overlap(decoded[0], decoded[1], ctx[0]),
                "honest_0_2": overlap(decoded[0], decoded[2 % k], ctx[0]),
                "fr8_0": overlap(judged["fr8"], decoded[0], ctx[0]),
                "copy_1": overlap(judged["copy"], decoded[1], ctx[0]),
            }
            rows.append(row)
            sl.outer_apply(params, decoded, ctx[0], settings, args.outer_lr)
            console.print(
                f"round {rnd:3d} ({time.perf_counter() - t0:5.0f} s): lowest z / zp "
                + " ".join(
                    f"{kind} {min(row[kind]['z']):+.2f}/{min(row[kind]['zp']):+.2f}"
                    for kind in KINDS
                )
            )
    return {"args": {k_: str(v) for k_, v in vars(args).items()}, "rounds": rows}


def summarize(
    result: dict[str, Any], stat: str, m_values: Sequence[int] = (1, 2, 4)
) -> list[dict[str, Any]]:
    """Per result kind and m: detection per vote at τ₀ (the lowest honest per-sample z) and the
    votes needed for P(eject) ≥ 0.9 with one vote per round."""
    import itertools
    import random

    rows = result["rounds"][1:]  # round 0: every error buffer empty, not representative
    tau0 = min(min(r["honest"][stat]) for r in rows)
    out = []
    rng = random.Random(0)
    for kind, m in itertools.product(KINDS, m_values):
        hits = trials = 0
        for r in rows:
            z = r[kind][stat]
            for _ in range(50):  # 50 draws of m samples per round
                pick = rng.sample(range(len(z)), min(m, len(z)))
                hits += min(z[i] for i in pick) < tau0
                trials += 1
        rate = hits / trials
        votes = math.ceil(math.log(0.1) / math.log(1 - rate)) if 0 < rate < 1 else (
            1 if rate >= 1 else None)  # fmt: skip
        zs = [v for r in rows for v in r[kind][stat]]
        out.append({
            "stat": stat, "kind": kind, "m": m, "tau0": round(tau0, 3),
            "detect_per_vote": round(rate, 3),
            "votes_for_0.9": votes, "z_mean": round(sum(zs) / len(zs), 3),
            "z_min": round(min(zs), 3),
        })  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    result = run(args)
    table = summarize(result, "z") + summarize(result, "zp")
    dz = [r["threads2_max_dz"] for r in result["rounds"] if "threads2_max_dz" in r]
    for row in table:
        print(json.dumps(row))
    print(json.dumps({"threads2_max_dz": max(dz) if dz else None}))
    for key in result["rounds"][0]["overlap"]:
        shared = [r["overlap"][key][0] for r in result["rounds"]]
        print(json.dumps({"overlap": key, "shared_min": min(shared), "shared_max": max(shared),
                          "round0": shared[0]}))  # fmt: skip
    if args.json:
        result["table"] = table
        args.json.write_text(json.dumps(result) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
