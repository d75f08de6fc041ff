"""Free riders: can a verifier tell a result trained on all of its batch from one trained on part?

Issue 39. Recompute verification (`psyche.daemon.verifying`) scores a sampled result with
`psyche.distro.similarity.captured_mass` against the gradient of a seed-chosen sub-batch of the
trainer's batch. That catches garbage, but a **free rider** that trains on 1 of its 8 samples and
reports the whole batch still points the right way. This bench measures candidate statistics that
could tell the two apart. No protocol change: it only measures.

Method. The tiny preset (`PRESETS["tiny"]`, `write_model_dir`), a synthetic corpus made here
(`synth_corpus` + `prepare_corpus`, sequence length 64 as `config/tiny/state.toml`), the tiny
run's DisTrO settings and LR schedule (cosine, base 4e-3, stretched over the run). `--clients`
honest clients of 8 samples each train every step with the real `Trainer.train_step` (lookahead,
error feedback, top-k, 1-bit payload) and every client applies the consensus of all of them two
steps later, as the protocol does. Slot 0's trainer also has three **free-rider shadows**: each
its own `Distro` (residual, lookahead, previous result) on the same weights, training in every
step on the first 4, 2 or 1 of slot 0's 8 samples and reporting the whole batch; a shadow never
enters the consensus (one free rider among the clients moves the weights little), so every
variant is judged at the same weights.

The verifier, at each step's pre-round weights (what `verifying.recompute` sees), recomputes the
gradient of every sample of the verified slots one by one (`Trainer.accumulate_gradients` on one
sample, as the daemon's `_gradient`). Verified slots come in pairs (0 with 1, 2 with 3, …): the
**assigned** sub-batch V is a group of `m` samples of the judged slot (the batch is cut by a
per-step shuffle into 8/m disjoint groups, as distinct verifiers take distinct samples), and the
**unassigned** sub-batch U is the group at the same place of the paired slot (samples another
trainer was assigned in the same step: the same distribution, not in the judged result). A
sub-batch's gradient is the mean of its samples' gradients (the loss is a mean over equally long
samples, so this is the sub-batch's gradient up to float rounding). Statistics per (result, V,
U), for m = 1, 2, 4 and 8 (8: the whole batch, the ceiling):

- `cm`: captured_mass(result, g_V), the score the daemon votes on today (for reference);
- `dcm`: captured_mass(result, g_V) − captured_mass(result, g_U) (Gauntlet-style: own data
  against other data);
- `cm_d`: captured_mass(result, g_V − g_U), the captured mass of the part of the gradient that is
  V's own;
- `z_d`: `similarity.score(result, g_V − g_U).z`, the same as a z-score (Σσ·d over the chosen
  coefficients / √Σd²): for a free rider that skipped all of V, V and U are exchangeable, so its
  distribution is symmetric about 0;
- `z_min` (m ≥ 2): the least over V's samples of `score(result, g_j − g_U).z`: one skipped sample
  in V is enough.

Statistics are computed from each sample gradient's DCT coefficients encoded once (the encode is
linear); the first measured step checks them against `captured_mass` and `score`.

For each statistic and m: honest (min, 1st percentile, mean) and per free-rider fraction (mean,
max, detection rate at τ₀ = the honest minimum, i.e. 0 false accusations over the honest trials:
accuse when below τ₀); then the verifications needed to eject with probability ≥ 0.9 when one
verification per round votes and an accusation needs k failed votes among them (k = 1, 2, 3), at
τ₀ and, for k = 3, at τ₁ = the honest 1st percentile (estimated false-accusation chance per
10-vote window given). Every `--thread-every`-th trial the verifier's recompute and encode run
again at 2 torch threads; the largest change of each statistic on honest results is reported.

Usage: `python bench/free_rider.py` (100 measured steps, about 7 min on 2 loaded cores);
`--trials 40` for a quick look; `--json PATH` for the numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny" / "state.toml"
T = TypeVar("T")
SAMPLES = 8
"""Samples per trainer and step."""
FRACTIONS = (4, 2, 1)
"""Samples of the 8 a free rider trains on (it reports the whole batch)."""
SIZES = (1, 2, 4, 8)
"""Sub-batch sizes m the verifier recomputes (8: the whole batch)."""
STATS = ("cm", "dcm", "cm_d", "z_d", "z_min")
TARGET_P = 0.9


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=100, help="measured steps")
    p.add_argument("--skip", type=int, default=5, help="steps trained before measuring")
    p.add_argument("--clients", type=int, default=4, help="honest clients in the consensus")
    p.add_argument(
        "--verified-slots", type=int, default=2,
        help="slots whose honest results are verified each step (even, ≤ --clients)",
    )  # fmt: skip
    p.add_argument(
        "--thread-every", type=int, default=5,
        help="every N-th trial also recompute at 2 torch threads (0: never)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.trials < 1 or args.skip < 1:
        p.error("--trials and --skip must be ≥ 1 (step 0's LR is 0: nothing to verify)")
    if args.verified_slots < 2 or args.verified_slots % 2 or args.verified_slots > args.clients:
        p.error("--verified-slots must be even, ≥ 2 and ≤ --clients")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    samples, seconds = on_fresh_inputs(args, measure)
    figures = summarize(samples, args)
    figures["seconds"] = seconds
    print_tables(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


def on_fresh_inputs(
    args: argparse.Namespace, measure: Callable[[argparse.Namespace, Path, Path], T]
) -> tuple[T, float]:
    """What ``measure`` gives on a fresh tiny model and corpus (`prepare_inputs`) at one torch
    thread, and the seconds it all took."""
    import torch  # after parsing: --help stays fast

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, data_dir = prepare_inputs(Path(tmp), args)
        out = measure(args, model_dir, data_dir)
    return out, round(time.perf_counter() - t0, 1)


def prepare_inputs(work: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """The tiny model and a local corpus with enough fresh samples for the run (as
    bench/scale.py's `prepare_inputs`)."""
    from psyche.data.prepare import ByteTokenizer, prepare_corpus
    from psyche.data.synth import synth_corpus
    from psyche.protocol.run_file import load_run_config
    from psyche.training.presets import PRESETS, write_model_dir

    rc = load_run_config(TINY, require_run_id=True)
    seq = rc.model.max_seq_len  # type: ignore[union-attr]
    model_dir, text_dir, data_dir = work / "model", work / "text", work / "data"
    write_model_dir(model_dir, preset=PRESETS["tiny"], seed=args.seed)
    steps = args.skip + args.trials
    synth_corpus(
        text_dir, int(steps * args.clients * SAMPLES * seq * 1.1) + 8 * seq, seed=args.seed
    )
    prepare_corpus([text_dir], ByteTokenizer(), data_dir, seq_len=seq)
    return model_dir, data_dir


# --- the run --------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Variant:
    """One result producer: an honest client (`trained` = 8) or a free-rider shadow."""

    name: str
    trainer: Any
    trained: int
    prev_self: Any = None


def measure(args: argparse.Namespace, model_dir: Path, data_dir: Path) -> dict[str, Any]:
    """Run the trajectory; return every statistic of every trial (see the module docstring)."""
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
    if dcfg.decay != 0:
        raise SystemExit("the shadows share one model: this bench needs weight_decay 0")
    chunk = dcfg.compression_chunk
    device = torch.device("cpu")
    # One model for everyone: every client holds the same weights between steps, and each
    # train_step restores them bit for bit after its lookahead (so the shadows see them too).
    model, _ = load_model(str(model_dir), device=device, dtype=torch.float32)
    params = tuple(p for _, p in sorted(model.named_parameters(), key=lambda i: i[0]))

    def new_trainer() -> Trainer:
        distro = Distro(model.named_parameters(), dcfg)
        return Trainer(model, distro, micro_batch_size=SAMPLES, device=device, seed=args.seed)

    clients = [Variant(f"honest{i}", new_trainer(), SAMPLES) for i in range(args.clients)]
    shadows = [Variant(f"fr{t}", new_trainer(), t) for t in FRACTIONS]
    spec = clients[0].trainer.distro.payload_spec
    data = LocalDataProvider(data_dir, llm.max_seq_len)  # type: ignore[union-attr]
    verifier = clients[0].trainer  # the gradient depends on the weights only
    pending: dict[int, list[Any]] = {}
    trials: list[dict[str, Any]] = []
    threads: list[dict[str, Any]] = []
    gen = torch.Generator().manual_seed(args.seed + 39)
    checked = False
    for step in range(steps):
        lr, prev_lr = lr_for_step(schedule, step), prev_lr_for_step(schedule, step)
        if step - 2 in pending:
            clients[0].trainer.apply_step(pending.pop(step - 2), lr=lr)
        slices = get_batch_ids_for_round(step * args.clients * SAMPLES, args.clients * SAMPLES,
                                         args.clients)  # fmt: skip
        batches = [data.get_samples(b) for b in slices]
        measured = step >= args.skip
        coeffs: dict[int, list[list[torch.Tensor]]] = {}
        coeffs2: dict[int, list[list[torch.Tensor]]] = {}
        first_grads: tuple[torch.Tensor, ...] | None = None
        if measured:
            verified = range(args.verified_slots)
            t_check = args.thread_every and (step - args.skip) % args.thread_every == 0
            for slot in verified:
                grads = [per_sample_grad(verifier, params, batches[slot][j : j + 1])
                         for j in range(SAMPLES)]  # fmt: skip
                if not checked and slot == 0:
                    first_grads = grads[0]
                coeffs[slot] = [encode_all(g, spec, chunk) for g in grads]
            if t_check:
                torch.set_num_threads(2)
                for slot in verified:
                    coeffs2[slot] = [
                        encode_all(per_sample_grad(verifier, params, batches[slot][j : j + 1]),
                                   spec, chunk)
                        for j in range(SAMPLES)
                    ]  # fmt: skip
                torch.set_num_threads(1)
        payloads: dict[str, Any] = {}
        for i, v in enumerate(clients + shadows):
            slot = i if i < len(clients) else 0
            batch = batches[slot][: v.trained]
            out = v.trainer.train_step(
                batch, step=step, lr=lr, prev_lr=prev_lr, prev_self_results=v.prev_self,
                zero_optim=step == 0, batch_id=(slices[slot].start, slices[slot].end),
            )  # fmt: skip
            v.prev_self = out.self_result
            payloads[v.name] = decode_payload(out.payload, spec)
        pending[step] = [payloads[c.name] for c in clients]
        if not measured:
            continue
        perm = torch.randperm(SAMPLES, generator=gen).tolist()
        judged = [(f"honest{s}", s, s ^ 1) for s in range(args.verified_slots)]
        judged += [(v.name, 0, 1) for v in shadows]
        if not checked and first_grads is not None:
            check_against_similarity(payloads["honest0"], first_grads, coeffs[0][0], chunk)
            checked = True
        ks = [r.k for r in payloads["honest0"].results]
        masses = {s: group_masses(coeffs[s], coeffs[s ^ 1], perm, ks) for s in coeffs if s % 2 == 0}
        masses2 = {
            s: group_masses(coeffs2[s], coeffs2[s ^ 1], perm, ks) for s in coeffs2 if s % 2 == 0
        }
        for name, slot, other in judged:
            row = {"step": step, "variant": name, "stats": all_stats(
                payloads[name], coeffs[slot], coeffs[other], perm, masses, slot)}  # fmt: skip
            trials.append(row)
            if coeffs2 and name.startswith("honest"):
                at2 = all_stats(payloads[name], coeffs2[slot], coeffs2[other], perm, masses2, slot)
                threads.append({"variant": name, "t1": row["stats"], "t2": at2})
        done = step - args.skip + 1
        if done % 10 == 0 or done == args.trials:
            print(f"measured {done}/{args.trials} steps", file=sys.stderr, flush=True)
    return {"trials": trials, "threads": threads}


def per_sample_grad(trainer: Any, params: Sequence[Any], tokens: Any) -> tuple[Any, ...]:
    """The verifier's recompute of one sample (as `verifying._Recompute._gradient`)."""
    import torch

    model = trainer.model
    with torch.random.fork_rng(devices=[]):
        model.zero_grad(set_to_none=True)
        trainer.accumulate_gradients(tokens)
    grads = tuple(
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params
    )
    model.zero_grad(set_to_none=True)
    return grads


def encode_all(grads: Sequence[Any], spec: Any, chunk: int) -> list[Any]:
    """Per tensor: the gradient's DCT tiles, shaped (*grid, totalk), as `similarity._chosen`."""
    from psyche.distro.compress import chunk_shape, totalk_of
    from psyche.distro.dct import encode

    out = []
    for g, t in zip(grads, spec.tensors, strict=True):
        c = encode(g.detach().float(), chunk)
        out.append(c.reshape(*chunk_shape(t.xshape), totalk_of(t.xshape)))
    return out


class Scorer:
    """Scores of one payload against linear combinations of sample gradients' DCT tiles: the
    payload's signs and indices, and each sample's coefficients at those indices."""

    def __init__(self, payload: Any, samples: Sequence[Sequence[Any]]) -> None:
        import torch

        self.signs = torch.cat([torch.sign(r.val.float()).flatten() for r in payload.results])
        self.ks = [r.k for r in payload.results]
        self.picked = [
            torch.cat([torch.gather(t, -1, r.idx).flatten() for t, r in
                       zip(tiles, payload.results, strict=True)])
            for tiles in samples
        ]  # fmt: skip

    def chosen(self, weights: dict[int, float]) -> Any:
        return sum(w * self.picked[j] for j, w in weights.items())

    def z(self, weights: dict[int, float]) -> float:
        c = self.chosen(weights)
        v = float((c * c).sum())
        return float((self.signs * c).sum()) / math.sqrt(v) if v > 0 else 0.0

    def captured(self, weights: dict[int, float], mass: float) -> float:
        return float((self.signs * self.chosen(weights)).sum()) / mass if mass > 0 else 0.0


def top_mass(
    samples: Sequence[Sequence[Any]], weights: dict[int, float], ks: Sequence[int]
) -> float:
    """Σ over tiles of the top-k |coefficient| of the combined gradient (`captured_mass`'s
    denominator; it does not depend on the payload)."""
    import torch

    total = 0.0
    for n, k in enumerate(ks):
        tiles = sum(w * samples[j][n] for j, w in weights.items())
        total += float(torch.topk(tiles.abs(), k, dim=-1).values.sum())  # type: ignore[union-attr]
    return total


def groups(perm: list[int]) -> list[tuple[int, list[int]]]:
    """(m, rows) of every group: the m consecutive samples of `perm`, for every m of SIZES."""
    return [(m, perm[g * m : (g + 1) * m]) for m in SIZES for g in range(SAMPLES // m)]


def group_masses(
    a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]], perm: list[int], ks: Sequence[int]
) -> list[tuple[float, float, float]]:
    """Per group (as `groups`): the top-k masses of g_V from `a`, of g_U from `b` (same rows)
    and of g_V − g_U; payload-independent, so computed once per slot pair and step."""
    both = list(a) + list(b)
    out = []
    for m, rows in groups(perm):
        wv = {j: 1 / m for j in rows}
        wu = {SAMPLES + j: 1 / m for j in rows}
        wd = {**wv, **{j: -w for j, w in wu.items()}}
        out.append((top_mass(both, wv, ks), top_mass(both, wu, ks), top_mass(both, wd, ks)))
    return out


def all_stats(
    payload: Any,
    own: Sequence[Sequence[Any]],
    other: Sequence[Sequence[Any]],
    perm: list[int],
    masses: dict[int, list[tuple[float, float, float]]],
    slot: int,
) -> dict[str, dict[str, list[float]]]:
    """Every statistic for every sub-batch size m: {stat: {m: [one value per group]}}; groups
    are the m consecutive samples of `perm` (V from `own`, U at the same positions of `other`).
    `masses` are `group_masses` by the even slot of each pair (`slot` is `own`'s)."""
    both = list(own) + list(other)  # sample j of `other` is index 8 + j
    sc = Scorer(payload, both)
    out: dict[str, dict[str, list[float]]] = {s: {} for s in STATS}
    for (m, rows), (mv, mu, md) in zip(groups(perm), masses[slot & ~1], strict=True):
        if slot % 2:
            mv, mu = mu, mv  # the pair's masses are from the even slot's side; |−d| = |d|
        wv = {j: 1 / m for j in rows}
        wu = {SAMPLES + j: 1 / m for j in rows}
        wd = {**wv, **{j: -w for j, w in wu.items()}}
        cm_v = sc.captured(wv, mv)
        vals = {
            "cm": cm_v,
            "dcm": cm_v - sc.captured(wu, mu),
            "cm_d": sc.captured(wd, md),
            "z_d": sc.z(wd),
        }
        if m > 1:
            vals["z_min"] = min(sc.z({j: 1.0, **{u: -w for u, w in wu.items()}}) for j in rows)
        for s, x in vals.items():
            out[s].setdefault(str(m), []).append(x)
    return out


def check_against_similarity(
    payload: Any, grads: Sequence[Any], tiles: Sequence[Any], chunk: int
) -> None:
    """The fast scores equal `captured_mass` and `score` on one sample's gradient."""
    from psyche.distro.similarity import captured_mass, score

    sc = Scorer(payload, [tiles])
    fast_cm = sc.captured({0: 1.0}, top_mass([tiles], {0: 1.0}, sc.ks))
    ref = score(payload, grads, chunk)
    ref_cm = captured_mass(payload, grads, chunk)
    if abs(fast_cm - ref_cm) > 1e-4 or abs(sc.z({0: 1.0}) - ref.z) > 1e-3 * max(1, abs(ref.z)):
        raise AssertionError(f"fast scores {fast_cm}, {sc.z({0: 1.0})} != {ref_cm}, {ref.z}")


# --- figures --------------------------------------------------------------------------------------


def votes_needed(p: float, k: int, limit: int = 1000) -> int | None:
    """Fewest votes n with P(Binomial(n, p) ≥ k) ≥ TARGET_P; None if over `limit`."""
    if p <= 0:
        return None
    for n in range(k, limit + 1):
        if 1 - sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k)) >= TARGET_P:
            return n
    return None


def tail(q: float, n: int, k: int) -> float:
    """P(Binomial(n, q) ≥ k)."""
    return 1 - sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k))


def summarize(samples: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    by: dict[str, dict[str, dict[str, list[float]]]] = {}
    for row in samples["trials"]:
        kind = "honest" if row["variant"].startswith("honest") else row["variant"]
        for s, per_m in row["stats"].items():
            for m, xs in per_m.items():
                by.setdefault(s, {}).setdefault(m, {}).setdefault(kind, []).extend(xs)
    table = []
    for s in STATS:
        for m, kinds in by.get(s, {}).items():
            h = sorted(kinds["honest"])
            tau0, tau1 = h[0], h[len(h) // 100]
            row: dict[str, Any] = {
                "stat": s, "m": int(m), "honest_n": len(h), "honest_min": h[0],
                "honest_p1": tau1, "honest_mean": sum(h) / len(h),
            }  # fmt: skip
            for t in FRACTIONS:
                xs = kinds.get(f"fr{t}", [])
                p0 = sum(x < tau0 for x in xs) / len(xs)
                p1 = sum(x < tau1 for x in xs) / len(xs)
                row[f"fr{t}"] = {
                    "n": len(xs), "mean": sum(xs) / len(xs), "max": max(xs), "detect": p0,
                    "votes_k1": votes_needed(p0, 1), "votes_k2": votes_needed(p0, 2),
                    "votes_k3": votes_needed(p0, 3), "detect_p1": p1,
                    "votes_k3_p1": votes_needed(p1, 3),
                }  # fmt: skip
            row["honest_false_k3_of_10_at_p1"] = tail(0.01, 10, 3)
            table.append(row)
    drift: dict[str, float] = {}
    for row in samples["threads"]:
        for s, per_m in row["t1"].items():
            for m, xs in per_m.items():
                ys = row["t2"][s][m]
                d = max(abs(a - b) for a, b in zip(xs, ys, strict=True))
                key = f"{s}/{m}"
                drift[key] = max(drift.get(key, 0.0), d)
    return {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "table": table,
        "thread_drift_max": drift,
        "thread_checked_results": len(samples["threads"]),
    }


def print_tables(fig: dict[str, Any]) -> None:
    def f(x: float | None, nd: int = 3) -> str:
        return "-" if x is None else f"{x:.{nd}f}"

    def n(x: int | None) -> str:
        return ">1000" if x is None else str(x)

    print()
    print("| stat | m | honest n | honest min / p1 / mean | fr4 mean / max / det. | "
          "fr2 mean / max / det. | fr1 mean / max / det. | votes to eject, k=1 (fr4/fr2/fr1) "
          "| k=3 at p1 (fr4/fr2/fr1) | 1↔2-thread drift |")  # fmt: skip
    print("|" + "---|" * 10)
    for r in fig["table"]:
        frs = [r[f"fr{t}"] for t in FRACTIONS]
        cells = [f"{f(x['mean'])} / {f(x['max'])} / {100 * x['detect']:.0f}%" for x in frs]
        k1 = "/".join(n(x["votes_k1"]) for x in frs)
        k3 = "/".join(n(x["votes_k3_p1"]) for x in frs)
        drift = fig["thread_drift_max"].get(f"{r['stat']}/{r['m']}")
        print(
            f"| {r['stat']} | {r['m']} | {r['honest_n']} | {f(r['honest_min'])} / "
            f"{f(r['honest_p1'])} / {f(r['honest_mean'])} | {' | '.join(cells)} | {k1} | {k3} "
            f"| {f(drift, 5)} |"
        )
    print(
        f"\nτ₀ = honest min (0 false accusations measured); det. = share of free-rider "
        f"verifications below τ₀; votes: fewest verifications (one per round) giving P(eject) ≥ "
        f"{TARGET_P} with k failed votes; k=3 at p1: threshold at the honest 1st percentile "
        f"(P(≥3 of 10 honest votes fail) ≈ {tail(0.01, 10, 3):.1e}). Thread drift over "
        f"{fig['thread_checked_results']} honest results. {fig['seconds']:.0f} s."
    )


if __name__ == "__main__":
    sys.exit(main())
