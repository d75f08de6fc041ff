"""Per-sample commitments: does a recomputed sample's fingerprint tell honest from faked?

Issue 39 item 1. `psyche.distro.sample_commit`: a trainer commits, per micro-batch, to
`PROJECTIONS` seeded ±1 projections of its micro-batch's own gradient at `COORDS` probed
coordinates (`Trainer.accumulate_gradients` with a probe, as `train_step` does). It takes them
at its **lookahead** weights (`p − prev_lr·sign(δ)`, δ private); a verifier recomputes a
seed-chosen sample at the **pre-round** weights. This bench measures whether the two agree far
enough above what a free rider could commit to for a sample it skipped.

Method. The tiny preset and corpus of `free_rider.py` (`prepare_inputs`), the tiny run's DisTrO
settings and LR schedule stretched over the run; 2 honest clients of 8 samples train every step
with the real `Trainer.train_step` and every client applies the consensus two steps later.
Client 0 trains with micro-batches of 1 sample (8 fingerprints), client 1 with micro-batches of 2
(4 fingerprints of 2 samples each). Before each measured step a verifier (micro-batches of 1:
another split than client 1's) recomputes every group of both batches, once at the pre-round
weights and once at the trainer's lookahead weights (what a verifier holding the trainer's
revealed sign(δ) sets: `Distro.lookahead` itself, then restored), at 1 torch thread, and every
`--thread-every`-th step the lookahead recompute again at 2 threads. Per group g of slot s, with
C the committed fingerprints and V the recomputed ones (cosine, `agreement`):

- `pre_round`: C[g] against the pre-round recompute (a verifier without the lookahead);
- `honest`: C[g] against V[g], the lookahead recompute at 1 thread; `honest_2t` at 2 threads;
- fakes a free rider could commit to for a group it skipped, against V[g]: `other` (the best of
  the other groups' commitments of the same batch: a rider that computed those, or repeated
  data), `mean_half` (the mean of the first half's commitments, for a group of the second half: a
  rider on ½ of the batch filling in the rest), `mean_all` (the mean of all the batch's
  commitments — an upper bound, it needs the whole compute), `other_slot` (the same group of
  another trainer's batch: a copied commitment) and `random` (Gaussian).

Usage: `nice python bench/free_rider_commitments.py` (`--trials 70`: 840 honest comparisons at
1 thread); `--json PATH` for the numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from free_rider import TINY, on_fresh_inputs

SAMPLES = 8
MICRO = (1, 2)
"""Micro-batch size of client 0 and client 1."""
FAKES = ("other", "mean_half", "mean_all", "other_slot", "random")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=70, help="measured steps")
    p.add_argument("--skip", type=int, default=3, help="steps trained before measuring")
    p.add_argument("--thread-every", type=int, default=3, help="2-thread recompute every N")
    p.add_argument(
        "--lookahead", choices=("public", "private", "none"), default="public",
        help="public: the product's (the previous result sent); private: sign(δ), as a verifier "
        "holding the trainer's revealed sign(δ) would rebuild it; none: no lookahead",
    )  # fmt: skip
    p.add_argument("--train-only", action="store_true", help="only the train loss (no verifier)")
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="the weights' dtype (a run's clients hold its checkpoint's)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    args.clients = len(MICRO)  # what free_rider.prepare_inputs sizes the corpus by
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rows, seconds = on_fresh_inputs(args, measure)
    figures = summarize(rows)
    figures["seconds"] = seconds
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "rows": rows}) + "\n")
    return 0


def measure(args: argparse.Namespace, model_dir: Path, data_dir: Path) -> list[dict[str, Any]]:
    import torch

    from psyche.data.local import LocalDataProvider
    from psyche.distro import Distro, decode_payload
    from psyche.protocol.data_selection import get_batch_ids_for_round
    from psyche.protocol.run_file import load_run_config
    from psyche.training import load_model, lr_for_step, prev_lr_for_step
    from psyche.training.trainer import Trainer, distro_config

    rc = load_run_config(TINY, require_run_id=True)
    llm = rc.model
    steps = args.skip + args.trials
    schedule = dataclasses.replace(llm.lr_schedule, total_steps=steps)  # type: ignore[union-attr]
    dcfg = distro_config(llm.optimizer)  # type: ignore[union-attr]
    device = torch.device("cpu")
    model, _ = load_model(str(model_dir), device=device, dtype=torch.float32)
    model = model.to(getattr(torch, args.dtype))
    params = [p for _, p in sorted(model.named_parameters(), key=lambda i: i[0])]
    trainers = [
        Trainer(model, Distro(model.named_parameters(), dcfg, commitments=True),
                micro_batch_size=m, device=device, seed=args.seed, commit_samples=True)
        for m in MICRO
    ]  # fmt: skip
    public = args.lookahead != "private"
    for t in trainers:
        t.verifiable_lookahead = public
        if args.lookahead == "none":
            t.distro.lookahead = _no_lookahead(t.distro)  # type: ignore[method-assign]
    spec = trainers[0].distro.payload_spec
    verifier = Trainer(model, Distro(model.named_parameters(), dcfg), micro_batch_size=1,
                       device=device, seed=args.seed)  # fmt: skip
    data = LocalDataProvider(data_dir, llm.max_seq_len)  # type: ignore[union-attr]
    prev_self: list[Any] = [None] * len(trainers)
    prev_sent: list[Any] = [None] * len(trainers)
    losses: list[float] = []
    pending: dict[int, list[Any]] = {}
    gen = torch.Generator().manual_seed(args.seed + 39)
    rows: list[dict[str, Any]] = []

    def recompute(tokens: Any, probe: Any) -> Any:
        model.zero_grad(set_to_none=True)
        verifier.accumulate_gradients(tokens)
        out = probe.project(probe.gather([p.grad for p in params]))
        model.zero_grad(set_to_none=True)
        return out

    for step in range(steps):
        lr, prev_lr = lr_for_step(schedule, step), prev_lr_for_step(schedule, step)
        if step - 2 in pending:
            trainers[0].apply_step(pending.pop(step - 2), lr=lr)
        slices = get_batch_ids_for_round(step * len(MICRO) * SAMPLES, len(MICRO) * SAMPLES,
                                         len(MICRO))  # fmt: skip
        batches = [data.get_samples(b) for b in slices]
        probe = verifier.probe(step)
        measured = step >= args.skip and lr > 0 and not args.train_only
        two = measured and args.thread_every and (step - args.skip) % args.thread_every == 0
        pre: list[list[Any]] = [[], []]
        ver: list[list[Any]] = [[], []]
        ver2: list[list[Any]] = [[], []]
        if measured:
            for s, m in enumerate(MICRO):
                groups = [batches[s][g : g + m] for g in range(0, SAMPLES, m)]
                pre[s] = [recompute(t, probe) for t in groups]
                # At the trainer's lookahead weights, as a verifier rebuilds them from the
                # trainer's previous result as received (public), or would from its revealed
                # sign(δ) (private): `Distro.lookahead` itself, then restored.
                if public:
                    ahead = None if args.lookahead == "none" else prev_sent[s]
                    trainers[s].distro.lookahead(prev_lr, ahead, verifiable=True)
                else:
                    trainers[s].distro.lookahead(prev_lr)
                ver[s] = [recompute(t, probe) for t in groups]
                if two:
                    torch.set_num_threads(2)
                    ver2[s] = [recompute(t, probe) for t in groups]
                    torch.set_num_threads(1)
                trainers[s].distro.cancel()
        results, commits = [], []
        for s, t in enumerate(trainers):
            out = t.train_step(batches[s], step=step, lr=lr, prev_lr=prev_lr,
                               prev_self_results=prev_self[s], zero_optim=step == 0,
                               batch_id=(slices[s].start, slices[s].end))  # fmt: skip
            prev_self[s] = out.self_result
            results.append(out.self_result)
            prev_sent[s] = decode_payload(out.payload, spec)  # what a verifier holds: f16 values
            commits.append(prev_sent[s].commitments.values)
            losses.append(out.loss)
        pending[step] = results
        if measured:
            rows += trial_rows(step, commits, (pre, ver, ver2), gen)
        if step % 10 == 0:
            print(f"step {step}/{steps} lr {lr:.2e}", file=sys.stderr, flush=True)
    # The lookahead's effect on training: the last 10 steps' mean train loss of both clients.
    rows.append({"train_loss_last10": sum(losses[-20:]) / len(losses[-20:])})
    return rows


def _no_lookahead(distro: Any) -> Any:
    """`distro.lookahead` with no step at all (the verifiable form without a public result)."""
    original = distro.lookahead

    def lookahead(prev_lr: float, public: Any = None, **kwargs: Any) -> None:
        original(prev_lr, None, verifiable=True, decay_lr=kwargs.get("decay_lr"))

    return lookahead


def trial_rows(
    step: int, commits: list[Any], recomputed: tuple[list[list[Any]], ...], gen: Any
) -> list[dict[str, Any]]:
    """Every statistic of every group of both slots in one step."""
    import torch

    from psyche.distro.sample_commit import agreement

    pre, ver, ver2 = recomputed
    rows = []
    for s, c in enumerate(commits):
        n = c.shape[0]
        half = c[: n // 2].mean(0)
        for g in range(n):
            v = ver[s][g]
            row: dict[str, Any] = {"step": step, "slot": s, "group": g}
            row["pre_round"] = agreement(c[g], pre[s][g])
            row["honest"] = agreement(c[g], v)
            if ver2[s]:
                row["honest_2t"] = agreement(c[g], ver2[s][g])
            row["other"] = max(agreement(c[h], v) for h in range(n) if h != g)
            if g >= n // 2:
                row["mean_half"] = agreement(half, v)
            row["mean_all"] = agreement(c.mean(0), v)
            other = commits[1 - s]
            row["other_slot"] = agreement(other[g % other.shape[0]], v)
            row["random"] = agreement(torch.randn(c.shape[1], generator=gen), v)
            rows.append(row)
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per statistic and micro-batch size: count, min, 1st percentile, median, max."""
    import numpy as np

    from psyche.distro.sample_commit import MATCH_THRESHOLD

    out: dict[str, Any] = {"threshold": MATCH_THRESHOLD}
    out.update(rows.pop())  # the train loss
    for key in ("pre_round", "honest", "honest_2t", *FAKES):
        for s, m in enumerate(MICRO):
            xs = np.array([r[key] for r in rows if key in r and r["slot"] == s])
            if not len(xs):
                continue
            out[f"{key}/mb{m}"] = {
                "n": len(xs),
                "min": round(float(xs.min()), 6),
                "p01": round(float(np.quantile(xs, 0.01)), 6),
                "median": round(float(np.median(xs)), 6),
                "p99": round(float(np.quantile(xs, 0.99)), 6),
                "max": round(float(xs.max()), 6),
                "below_threshold": int((xs < MATCH_THRESHOLD).sum()),
            }
    return out


if __name__ == "__main__":
    sys.exit(main())
