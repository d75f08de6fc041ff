"""Attacks on DisTrO training and what recompute verification and aggregation do against them.

Method. The optimizer pipeline of `bench/distro_vs_adamw.py` (tiny Llama preset, synthetic corpus,
K clients each with its own model and `Distro`, lag 2, every client applying the same payloads,
weights checked bit-identical), with `--attackers` of the K clients malicious from step 0. Each
step every honest client trains its slice; an attacker sends, for its slice, one of:

- `flip`: its honest update with every sign flipped;
- `random`: random well-formed coefficients and signs;
- `cancel`: a result of the consensus applied this step (a peer's), every sign flipped;
- `replay`: its own result of the previous step again (a free rider after its first step);
- `garbage`: an honest-style update from random tokens instead of its batch;
- `push`: its honest update with one matrix (`model.embed_tokens.weight`) replaced by a fixed
  set of coefficients and signs, the same every step.

Defence (`--verify VP`, with the copy check: a result whose content repeats one of this or the
previous step is refused by every honest client, left out and its trainer ejected by the next
step's health check): each step `s`, the protocol's sampling (`sampled_trainers` with a seed
per step) picks `⌈K·VP/100⌉` results; three verifiers (the first three of a seed shuffle of the
clients) recompute the sampled trainer's gradient on its slice from the pre-step weights and score
its payload with `psyche.distro.similarity.captured_mass`; an honest verifier votes as the
daemon does (`verdict_on`: match at or above `THRESHOLD`, mismatch below `MISMATCH_BELOW`, no
vote between), an attacker votes match, nobody judges itself; a majority of the verifiers
(at least 2 votes) rejects it. Results of a step whose LR is 0 (step 0 here: the warmup starts
at 0) are not judged: they carry no gradient of their batch. A rejected result is left out of
its apply (two steps later) and the trainer is ejected: it sends nothing from the next step on
and earns no points. Points: one per applied result (the Treasurer's share before slashing).
Every honest verifier's judgement of an honest result counts as an honest vote; a mismatch vote
among them is a false positive, and an undecided one is counted apart.

With `--commitments` every client also sends per-sample commitments and every honest verifier
checks the one of its first sample before it votes (`bench/byzantine_commit.py`, the daemon's
check): a free rider's fake fingerprint is a mismatch vote.

Aggregation (`--aggregation`): `mean` is the protocol's (per coefficient, over the peers that
chose it); `sum` adds the peers' ±1 values instead, which, since apply takes the sign, is the same
as dividing by the number of results: one client weighs 1/K wherever it is alone.

Usage: `python bench/byzantine.py --quick --attack flip --verify 25` (one run), or
`--matrix` for the table of bench/README.md. Not the round engine: the coordinator's verdict rules
are tested on their own (tests/vectors/verification); this measures the arithmetic of attack and
defence.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import byzantine_attacks as cheap  # beside this file, not a package

ATTACKS = ("none", "flip", "random", "cancel", "replay", "garbage", "push", *cheap.NEW_ATTACKS)
SPARSELOCO_ONLY = ("reset",)
"""Attacks of the SparseLoCo arm only (bench/byzantine_sparseloco.py)."""


@dataclass(slots=True)
class RunResult:
    attack: str
    attackers: int
    clients: int
    aggregation: str
    verify: int
    final_val: float = math.nan
    ejected_at: dict[int, int] = field(default_factory=dict)
    points: dict[int, int] = field(default_factory=dict)
    honest_votes: int = 0
    false_positives: int = 0
    honest_undecided: int = 0
    """Honest results whose score fell between MISMATCH_BELOW and THRESHOLD: no vote cast."""
    attacker_undecided: int = 0
    verify_fwd_bwd_s: float = 0.0
    train_fwd_bwd_s: float = 0.0
    min_honest_score: float = math.inf
    honest_scores: list[float] = field(default_factory=list)
    attacker_scores: list[float] = field(default_factory=list)
    honest_z: list[float] = field(default_factory=list)
    attacker_z: list[float] = field(default_factory=list)
    honest_sign_z: list[float] = field(default_factory=list)
    attacker_sign_z: list[float] = field(default_factory=list)
    honest_captured: list[float] = field(default_factory=list)
    attacker_captured: list[float] = field(default_factory=list)
    honest_tensor_z: dict[str, list[float]] = field(default_factory=dict)
    attacker_tensor_z: dict[str, list[float]] = field(default_factory=dict)
    honest_overlap: list[float] = field(default_factory=list)
    honest_own_overlap: list[float] = field(default_factory=list)
    honest_repeats: dict[str, int] = field(default_factory=dict)
    honest_pairs: int = 0
    votes: list[tuple[int, int, int, bool, float]] = field(default_factory=list)
    honest_agreement: list[float] = field(default_factory=list)
    """Commitment agreements of honest results (`--commitments`)."""
    attacker_agreement: list[float] = field(default_factory=list)
    escalations: int = 0
    escalated: list[tuple[int, int, int, bool, float, float]] = field(default_factory=list)
    """Escalated votes: (step, trainer, verifier, attacker, first score, escalated score)."""
    """Every vote: (judged step, trainer, verifier, trainer is an attacker, score)."""
    record_s: float = 0.0
    """SparseLoCo with --verify: the trainers' seconds recording their chains (hashing)."""
    audit_findings: dict[str, int] = field(default_factory=dict)
    """SparseLoCo with --verify: per audit (and copy-check refusal), what it found."""
    audit_seconds: dict[str, float] = field(default_factory=dict)
    """SparseLoCo with --verify: the honest audits' seconds by part (states, encode, step)."""
    retried_samples: int = 0
    """Samples of rejected results trained again (bench/byzantine_data.py)."""
    left_out: list[tuple[int, int, bool]] = field(default_factory=list)
    """DisTrO: results the apply's agreement filter left out
    (psyche.distro.agreement): (step, trainer, trainer is an attacker)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attack", choices=(*ATTACKS, *SPARSELOCO_ONLY), default="none")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--attackers", type=int, default=1)
    p.add_argument("--aggregation", choices=("mean", "sum"), default="mean")
    p.add_argument("--verify", type=int, default=0, metavar="VP", help="verification percent")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--quick", action="store_true", help="40 steps")
    p.add_argument("--matrix", action="store_true", help="every attack, with and without --verify")
    p.add_argument(
        "--attacks", help="with --matrix: only these attacks (comma-separated; default all)"
    )
    p.add_argument(
        "--defended-only", action="store_true",
        help="with --matrix: only the all-honest reference and the defended runs",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads for training")
    p.add_argument(
        "--verify-samples", type=int, default=0, metavar="M",
        help="verifiers recompute on the first M samples of the batch (default: all)",
    )  # fmt: skip
    p.add_argument(
        "--verify-threads",
        type=int,
        default=0,
        help="torch threads of the verifiers (default: --threads)",
    )
    p.add_argument("--batch", type=int, default=4, help="samples per client and step")
    p.add_argument(
        "--escalate", type=int, default=0, metavar="E",
        help="a verifier whose first score is below THRESHOLD recomputes E samples and votes on "
        "those (the daemon's escalation; 0: vote on the first score)",
    )  # fmt: skip
    p.add_argument(
        "--measure", choices=("z", "captured"), default="z",
        help="the verdict: Score.passed (z) or the former captured-mass threshold",
    )  # fmt: skip
    p.add_argument("--calibration", action="store_true", help="keep every score in the JSON")
    p.add_argument(
        "--commitments", action="store_true",
        help="every client commits per sample and verifiers check it (bench/byzantine_commit.py)",
    )  # fmt: skip
    p.add_argument(
        "--private-lookahead", action="store_true",
        help="with --commitments and no --verify: trainers look ahead by sign(δ) (loss only)",
    )  # fmt: skip
    p.add_argument(
        "--score-at-point", action="store_true",
        help="with --commitments: score at the trainer's lookahead point, one gradient for both",
    )  # fmt: skip
    p.add_argument(
        "--own-sub-batch", action="store_true",
        help="each verifier's first sub-batch from its own position (before 2026-12-04: the "
        "committed sample a second gradient for two of the three)",
    )  # fmt: skip
    p.add_argument(
        "--score-only", action="store_true",
        help="judge and record scores but never reject or eject (score distributions of attacks)",
    )  # fmt: skip
    p.add_argument(
        "--fixed-slices", action="store_true",
        help="every client keeps its slice of the global batch, an ejected one's left untrained "
        "(before 2026-12-04: without the protocol's reassignment and retries)",
    )  # fmt: skip
    p.add_argument(
        "--no-agreement", action="store_true",
        help="DisTrO: apply every accepted result, as before 2026-12-07 (no agreement filter)",
    )  # fmt: skip
    p.add_argument(
        "--optimizer", choices=("distro", "sparseloco"), default="distro",
        help="sparseloco: bench/byzantine_sparseloco.py (--verify: the inner-step audit)",
    )  # fmt: skip
    p.add_argument("--inner-steps", type=int, default=4, help="SparseLoCo H")
    p.add_argument("--lr-inner", type=float, default=3e-3, help="SparseLoCo inner AdamW LR")
    p.add_argument("--outer-lr", type=float, default=1.0, help="SparseLoCo outer LR")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.quick:
        args.steps = 40
    if not 0 <= args.attackers < args.clients:
        p.error("--attackers must be below --clients")
    if not 0 <= args.verify <= 100:
        p.error("--verify must be 0 … 100")
    if args.private_lookahead and (args.verify or args.matrix or not args.commitments):
        p.error("--private-lookahead measures the loss only: with --commitments, no --verify")
    if args.attacks is None and args.optimizer == "sparseloco":
        import byzantine_sparseloco as slb

        args.attacks = ",".join(slb.ATTACKS[1:])
    if args.attacks is not None:
        chosen = tuple(a for a in args.attacks.split(",") if a)
        known = (*ATTACKS[1:], *SPARSELOCO_ONLY)
        unknown = [a for a in chosen if a not in known]
        if unknown or not chosen:
            p.error(f"--attacks: unknown {unknown or 'empty'}; choose from {known}")
        args.attacks = chosen
    else:
        args.attacks = ATTACKS[1:]
    if args.optimizer == "sparseloco":
        import byzantine_sparseloco as slb

        if args.aggregation != "mean" or args.commitments or args.escalate or args.score_only:
            p.error("--optimizer sparseloco: no --aggregation, --commitments, --escalate, "
                    "--score-only (its defence is the inner-step audit)")  # fmt: skip
        if args.steps % args.inner_steps or args.inner_steps < 1:
            p.error("--steps must be a multiple of --inner-steps")
        wrong = [a for a in (*args.attacks, args.attack) if a not in slb.ATTACKS]
        if wrong and (args.matrix or args.attack in wrong):
            p.error(f"--optimizer sparseloco: not implemented for {wrong}")
    elif args.attack in SPARSELOCO_ONLY or set(args.attacks) & set(SPARSELOCO_ONLY):
        p.error(f"{', '.join(SPARSELOCO_ONLY)}: an attack of --optimizer sparseloco only")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch  # after parsing: --help stays fast

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from rich.console import Console

    import distro_vs_adamw as base

    torch.set_num_threads(args.threads)
    console = Console(stderr=True)
    cfg = base.BenchConfig(
        steps=args.steps, clients=args.clients, batch_per_client=args.batch, seq_len=128,
        val_samples=64, seed=args.seed, lr_distro=3e-3, lr_adamw=3e-3, lag=2, evals=1,
        timing_warmup=0,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        ws = base.prepare_workspace(cfg, Path(tmp), console)
        runs: list[tuple[str, int, str]] = []
        if args.matrix and args.optimizer == "sparseloco":  # undefended, or defended with --verify
            runs += [("none", 0, "mean")] + [(a, args.verify, "mean") for a in args.attacks]
        elif args.matrix:
            vp = args.verify or 25
            if args.defended_only:
                runs.append(("none", 0, "mean"))
                runs += [(attack, vp, "mean") for attack in args.attacks]
            else:
                summed = [a for a in ("flip", "cancel") if a in args.attacks]
                for aggregation in ("mean", "sum") if summed else ("mean",):
                    runs.append(("none", 0, aggregation))
                for attack in args.attacks:
                    runs += [(attack, 0, "mean"), (attack, vp, "mean")]
                runs += [(a, 0, "sum") for a in summed]
        else:
            runs.append((args.attack, args.verify, args.aggregation))
        results = []
        for attack, vp, aggregation in runs:
            t = time.perf_counter()
            if args.optimizer == "sparseloco":
                import byzantine_sparseloco as slb

                r = slb.run(cfg, ws, args, attack, RunResult(attack, args.attackers, cfg.clients,
                                                             aggregation, vp))  # fmt: skip
            else:
                import byzantine_distro as dist

                attackers = args.attackers if attack != "none" else 0
                r = dist.run(cfg, ws, args, attack, RunResult(attack, attackers, cfg.clients,
                                                              aggregation, vp))  # fmt: skip
            console.print(
                f"{attack:8s} vp={vp:3d} {aggregation:4s}: val {r.final_val:.4f}, ejected "
                f"{r.ejected_at or '-'}, points {r.points}, false positives "
                f"{r.false_positives}/{r.honest_votes}, undecided {r.honest_undecided} honest "
                f"{r.attacker_undecided} attacker ({time.perf_counter() - t:.0f} s)"
            )
            results.append(r)
    rows = report(results, args.calibration)
    print(json.dumps(rows, indent=1))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


def report(results: Sequence[RunResult], calibration: bool = False) -> list[dict[str, Any]]:
    """One row per run, the loss as a ratio to the all-honest run of the same aggregation."""
    honest = {r.aggregation: r.final_val for r in results if r.attack == "none"}
    rows = []
    for r in results:
        ref = honest.get(r.aggregation, honest.get("mean", math.nan))
        extra = r.verify_fwd_bwd_s / r.train_fwd_bwd_s if r.train_fwd_bwd_s else 0.0
        rows.append(
            {
                "attack": r.attack,
                "attackers": r.attackers if r.attack != "none" else 0,
                "clients": r.clients,
                "aggregation": r.aggregation,
                "verification_percent": r.verify,
                "final_val": round(r.final_val, 4),
                "loss_ratio": round(r.final_val / ref, 4) if ref == ref else None,
                "ejected_at_step": r.ejected_at,
                "retried_samples": r.retried_samples,
                "left_out": {
                    "honest": sum(not a for *_, a in r.left_out),
                    "attacker": sum(a for *_, a in r.left_out),
                    "at": r.left_out,
                },
                "points": r.points,
                "honest_votes": r.honest_votes,
                "false_positives": r.false_positives,
                "honest_undecided": r.honest_undecided,
                "attacker_undecided": r.attacker_undecided,
                "min_honest_score": None
                if math.isinf(r.min_honest_score)
                else round(r.min_honest_score, 4),
                "verification_compute_fraction": round(extra, 4),
                "honest_scores": _quantiles(r.honest_scores),
                "attacker_scores": _quantiles(r.attacker_scores),
                "z": {"honest": _quantiles(r.honest_z), "attacker": _quantiles(r.attacker_z)},
                "sign_z": {
                    "honest": _quantiles(r.honest_sign_z),
                    "attacker": _quantiles(r.attacker_sign_z),
                },
                "captured": {
                    "honest": _quantiles(r.honest_captured),
                    "attacker": _quantiles(r.attacker_captured),
                },
                "tensor_z_honest_min": {n: round(min(v), 3) for n, v in r.honest_tensor_z.items()},
                "tensor_z_attacker_max": {
                    n: round(max(v), 3) for n, v in r.attacker_tensor_z.items()
                },
                "overlap_honest_pairs": _quantiles(r.honest_overlap),
                "overlap_honest_own_previous": _quantiles(r.honest_own_overlap),
                "honest_tensor_repeats": r.honest_repeats,
                "honest_pairs": r.honest_pairs,
                "commitment": {
                    "honest": _quantiles(r.honest_agreement),
                    "attacker": _quantiles(r.attacker_agreement),
                    "attacker_below_threshold": sum(a < 0.999 for a in r.attacker_agreement),
                },
                "escalations": r.escalations,
                "escalated": r.escalated,
                "chain_recording_fraction": round(r.record_s / r.train_fwd_bwd_s, 4)
                if r.train_fwd_bwd_s
                else 0.0,
                "audit_findings": r.audit_findings,
                "audit_fractions": {
                    n: round(v / r.train_fwd_bwd_s, 4) for n, v in r.audit_seconds.items()
                }
                if r.train_fwd_bwd_s
                else {},
            }
        )
        if calibration:
            rows[-1]["all"] = {
                "honest_z": r.honest_z, "attacker_z": r.attacker_z,
                "honest_captured": r.honest_captured, "attacker_captured": r.attacker_captured,
                "votes": r.votes,
            }  # fmt: skip
    return rows


def _quantiles(xs: Sequence[float]) -> dict[str, float] | None:
    """min, 1st percentile, median and max of the scores judged."""
    if not xs:
        return None
    v = sorted(xs)
    return {
        "n": len(v),
        "min": round(v[0], 4),
        "p1": round(v[len(v) // 100], 4),
        "median": round(v[len(v) // 2], 4),
        "max": round(v[-1], 4),
    }


if __name__ == "__main__":
    from psyche.cli.process_exit import exit_now

    # Without the interpreter's teardown (2-4 s of collecting torch's heap; every temporary
    # directory is a ``with`` block, already removed), as the console scripts end.
    exit_now(main())
