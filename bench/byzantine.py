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
import byzantine_commit as bc

ATTACKS = ("none", "flip", "random", "cancel", "replay", "garbage", "push", *cheap.NEW_ATTACKS)
SPARSELOCO_ONLY = ("reset",)
"""Attacks of the SparseLoCo arm only (bench/byzantine_sparseloco.py)."""
PUSHED = "model.embed_tokens.weight"


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
        "--score-only", action="store_true",
        help="judge and record scores but never reject or eject (score distributions of attacks)",
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
                r = run(cfg, ws, args, attack, vp, aggregation)
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


def run(
    cfg: Any, ws: Any, args: argparse.Namespace, attack: str, vp: int, aggregation: str
) -> RunResult:
    import torch

    import distro_vs_adamw as base
    from psyche.coordinator.verification import sampled_trainers
    from psyche.daemon.commit_check import MISMATCH
    from psyche.daemon.rounds import result_fingerprint
    from psyche.data.local import LocalDataProvider
    from psyche.distro import Distro, DistroResult, Payload, decode_payload, encode_payload
    from psyche.distro.overlap import near_duplicate, repeated_tensors, signed_overlap
    from psyche.distro.sample_commit import MATCH_THRESHOLD
    from psyche.distro.similarity import THRESHOLD, Score, score, verdict_on
    from psyche.protocol.commitment import sha256
    from psyche.protocol.shuffle import compute_shuffled_index
    from psyche.training import lr_for_step, prev_lr_for_step

    k = cfg.clients
    attackers = set(range(k - args.attackers, k)) if attack != "none" else set()
    out = RunResult(attack, len(attackers), k, aggregation, vp)
    data = LocalDataProvider(ws.data_dir, cfg.seq_len)
    dcfg = base.distro_config(cfg)
    clients = []
    for _ in range(k):
        model = base.load(ws)
        clients.append(base.Client(model, Distro(model.named_parameters(), dcfg,
                                                 commitments=args.commitments)))  # fmt: skip
    verifier_model = base.load(ws)
    committing = {i: bc.committing_trainer(c, cfg.seed) for i, c in enumerate(clients)
                  if args.commitments}  # fmt: skip
    for t in committing.values():
        t.verifiable_lookahead = not args.private_lookahead
    commit = bc.CommitVerifier(verifier_model, dcfg, cfg.seed) if args.commitments else None
    trainers = {i: committing.get(i) or cheap.trainer_for(clients[i], cfg.batch_per_client,
                                                          cfg.seed)
                for i in attackers if attack in cheap.TRAINER_ATTACKS}  # fmt: skip
    spec = clients[0].distro.payload_spec
    names = clients[0].distro.names
    schedule = cfg.schedule(cfg.lr_distro)
    gen = torch.Generator().manual_seed(cfg.seed + 7)
    pending: dict[int, list[tuple[int, Payload]]] = {}
    rejected: dict[int, set[int]] = {}
    ejected: set[int] = set()
    last_sent: dict[int, Payload] = {}
    applied_now: list[Payload] = []
    pushed: Payload | None = None
    seen: dict[int, set[bytes]] = {}
    held: dict[int, list[tuple[int, Payload]]] = {}

    def flipped(p: Payload) -> Payload:
        res = tuple(DistroResult(r.idx, -r.val, r.xshape, r.totalk) for r in p.results)
        return Payload(p.step, p.batch_start, p.batch_end, p.trainer_nonce, p.quantized, res)

    def random_like(p: Payload) -> Payload:
        res = []
        for r in p.results:
            keys = torch.rand((*r.idx.shape[:-1], r.totalk), generator=gen)
            idx = keys.argsort(dim=-1)[..., : r.k]
            val = torch.where(torch.rand(r.val.shape, generator=gen) < 0.5, 1.0, -1.0)
            res.append(DistroResult(idx, val, r.xshape, r.totalk))
        return Payload(p.step, p.batch_start, p.batch_end, p.trainer_nonce, p.quantized, tuple(res))

    step_tokens: dict[int, list[torch.Tensor]] = {}
    step_pre: dict[int, list[torch.Tensor]] = {}
    vparams = [p for _, p in sorted(verifier_model.named_parameters())]

    def rows_of(judged: int, trainer: int, position: int, m: int) -> list[int]:
        """The samples of a trainer's batch that the verifier at `position` recomputes, `m` of
        them: consecutive positions of one shuffle of the batch per (step, trainer), the
        verifier at position p starting at p·`--verify-samples`, so the verifiers of a result
        recompute distinct samples (as the daemon's `sub_batch`); more than that when escalating
        (wrapping)."""
        b = len(step_tokens[judged][trainer])
        if m >= b:
            return list(range(b))
        key = sha256(b"sub-%d-%d" % (judged, trainer))
        order = torch.randperm(b, generator=torch.Generator().manual_seed(
            int.from_bytes(key[:8], "little")))  # fmt: skip
        start = position * (args.verify_samples or b)
        return [int(order[(start + i) % b]) for i in range(m)]

    def verifier_threads(verifier: int) -> int:
        return (args.verify_threads or args.threads) if verifier % 2 == 0 else args.threads

    def gradient_of(toks: Any, verifier: int) -> tuple[list[Any], float]:
        """The verifier's gradient of `toks` at its model's weights, on `--verify-threads`
        threads if its index is even, else on the trainers' `--threads` (so both thread counts
        judge every run's results), and the seconds its forward/backward took."""
        verifier_model.zero_grad(set_to_none=True)
        torch.set_num_threads(verifier_threads(verifier))
        t = time.perf_counter()
        base.forward_backward(verifier_model, toks, 1.0)
        dt = time.perf_counter() - t
        torch.set_num_threads(args.threads)
        grads = [p.grad.clone() for p in vparams]  # type: ignore[union-attr]
        verifier_model.zero_grad(set_to_none=True)
        return grads, dt

    def score_of(judged: int, trainer: int, payload: Payload, verifier: int, rows: list[int],
                 check: int | None = None) -> tuple[Score, float, float | None]:  # fmt: skip
        """One verifier's score of `payload` on the samples `rows` of the trainer's batch, the
        seconds its forward/backward took and, with `check` (a sample of the batch), the
        commitment agreement of that sample (None: no vote). With `--score-at-point` a result
        with commitments is scored at the trainer's lookahead point, and where `rows` is that
        one sample its gradient serves both checks."""
        with torch.no_grad():
            for p, w in zip(vparams, step_pre[judged], strict=True):
                p.copy_(w)
        toks = step_tokens[judged][trainer]
        status, public = ("none", None)
        if commit is not None:
            status, public = commit.point(payload, held.get(judged - 1, []), trainer)
        agreement = MISMATCH if check is not None and status == "mismatch" else None
        prev_lr = prev_lr_for_step(schedule, judged)
        if status == "ok" and args.score_at_point:
            assert commit is not None
            with commit.at_point(public, prev_lr):
                grads, dt = gradient_of(toks[rows], verifier)
                if check is not None and rows == [check]:
                    agreement = commit.agreement(payload, grads, check, len(toks))
                    check = None
        else:
            grads, dt = gradient_of(toks[rows], verifier)
        if check is not None and status == "ok":
            assert commit is not None
            with commit.at_point(public, prev_lr):
                one, dt1 = gradient_of(toks[[check]], verifier)
            agreement, dt = commit.agreement(payload, one, check, len(toks)), dt + dt1
        return score(payload, grads, cfg.chunk), dt, agreement

    def verify_round(judging: int) -> None:
        """Round `judging` judges the results of `judging − 1` (docs/protocol.md)."""
        judged = judging - 1
        if lr_for_step(schedule, judged) == 0:
            return  # an LR of 0 leaves the residual as it was: nothing of this batch to check
        by_client = dict(pending[judged])
        # The protocol's seed is the round's: `--seed` varies it (seed 0 keeps the sampling of the
        # tables measured before it did).
        tag = b"-%d" % args.seed if args.seed else b""
        seed = int.from_bytes(sha256(b"byzantine-%d" % judging + tag)[:8], "little")
        vseed = sha256(b"byzantine-verifiers-%d" % judging + tag)
        order = sorted(range(k), key=lambda i: compute_shuffled_index(i, k, vseed))
        verifiers = [i for i in order if i not in ejected][:3]
        for trainer in sampled_trainers(k, seed, vp):
            if trainer not in by_client:
                continue
            voters = [v for v in verifiers if v != trainer]
            honest = [v for v in voters if v not in attackers]
            if not honest:
                continue
            against = 0
            bad = trainer in attackers
            # Every verifier checks the commitment of the same sample (the daemon's
            # `SubBatch.committed`): the first of the slot's shuffle.
            committed = rows_of(judged, trainer, 0, 1)[0] if commit is not None else None
            for v in honest:  # each honest verifier recomputes and votes on its own
                position = verifiers.index(v)
                m = args.verify_samples or len(step_tokens[judged][trainer])
                rows = rows_of(judged, trainer, position, m)
                sc, dt, agreement = score_of(judged, trainer, by_client[trainer], v, rows,
                                             check=committed)  # fmt: skip
                out.verify_fwd_bwd_s += dt
                if agreement is not None:
                    (out.attacker_agreement if bad else out.honest_agreement).append(agreement)
                failed = agreement is not None and agreement < MATCH_THRESHOLD
                if (not failed and args.escalate > m and sc.captured < THRESHOLD
                        and args.measure == "captured"):  # fmt: skip
                    # Too low to match on one sub-batch: more samples before any vote (the
                    # daemon's escalation, psyche.daemon.verifying).
                    out.escalations += 1
                    first = sc.captured
                    rows = rows_of(judged, trainer, position, args.escalate)
                    sc, dt, _ = score_of(judged, trainer, by_client[trainer], v, rows)
                    out.verify_fwd_bwd_s += dt
                    out.escalated.append((judged, trainer, v, bad, round(first, 5),
                                          round(sc.captured, 5)))  # fmt: skip
                # The daemon's vote: match, mismatch, or none in the gap between the two
                # thresholds (psyche.distro.similarity.verdict_on).
                vote = sc.passed if args.measure == "z" else verdict_on(sc.captured)
                vote = False if failed else vote  # a failed commitment is evidence enough
                value = sc.z if args.measure == "z" else sc.captured
                against += 1 if vote is False else 0
                if vote is None:
                    if bad:
                        out.attacker_undecided += 1
                    else:
                        out.honest_undecided += 1
                (out.attacker_scores if bad else out.honest_scores).append(value)
                out.votes.append((judged, trainer, v, bad, round(value, 5)))
                (out.attacker_z if bad else out.honest_z).append(sc.z)
                (out.attacker_sign_z if bad else out.honest_sign_z).append(sc.sign_z)
                (out.attacker_captured if bad else out.honest_captured).append(sc.captured)
                per = out.attacker_tensor_z if bad else out.honest_tensor_z
                for name, tz in zip(names, sc.tensor_z, strict=True):
                    per.setdefault(name, []).append(tz)
                if not bad:
                    out.honest_votes += 1
                    out.false_positives += 1 if vote is False else 0
                    out.min_honest_score = min(out.min_honest_score, value)
            if (
                not args.score_only
                and against >= len(verifiers) // 2 + 1
                and against >= min(2, len(voters))
            ):
                rejected.setdefault(judged, set()).add(trainer)
                # Its result of the judging round is left out too (clients read the verdict
                # stored a round earlier), and it sends nothing from now on.
                rejected.setdefault(judging, set()).add(trainer)
                if trainer not in ejected:
                    ejected.add(trainer)
                    out.ejected_at[trainer] = judging

    def send(step: int, i: int, wire: Payload, sent: list[tuple[int, Payload]], both_lr: bool
             ) -> None:  # fmt: skip
        """Client `i` sends `wire` in `step`: the near-duplicate calibration over honest pairs,
        then the copy check (with `--verify`), which refuses and ejects a copy."""
        lr = lr_for_step(schedule, step)
        last_sent[i] = wire
        sent.append((i, wire))
        if both_lr:  # near-duplicate calibration over honest pairs
            for j, other in held.get(step, []) + held.get(step - 1, []):
                if i in attackers or j in attackers:
                    continue
                out.honest_pairs += 1
                ov = signed_overlap(wire, other)
                own = j == i
                (out.honest_own_overlap if own else out.honest_overlap).append(ov)
                for n in repeated_tensors(wire, other):
                    out.honest_repeats[names[n]] = out.honest_repeats.get(names[n], 0) + 1
        if vp and lr > 0 and not args.score_only:  # the copy check (results at LR 0 are alike)
            fp = result_fingerprint(wire)
            recent = held.get(step, []) + held.get(step - 1, [])
            if fp in seen.get(step, set()) | seen.get(step - 1, set()) or any(
                near_duplicate(wire, other) for _, other in recent
            ):
                # Refused and not attested by every honest witness: left out, and the
                # health check of the next round ejects the trainer.
                rejected.setdefault(step, set()).add(i)
                if i not in ejected:
                    ejected.add(i)
                    out.ejected_at[i] = step + 1
            seen.setdefault(step, set()).add(fp)
        held.setdefault(step, []).append((i, wire))

    def apply(payloads: list[Payload], lr: float) -> None:
        if aggregation == "mean":
            for c in clients:
                c.distro.apply(payloads, lr)
            return
        for c in clients:  # sum: every payload's ±1 added; the sign decides, as in apply
            sum_apply(c.distro, payloads, lr)

    for step in range(cfg.steps):
        lr, prev_lr = lr_for_step(schedule, step), prev_lr_for_step(schedule, step)
        applied_now = []
        if step - 2 in pending:
            keep = [(i, p) for i, p in pending.pop(step - 2) if i not in rejected.get(step - 2, ())]
            for i, _ in keep:
                out.points[i] = out.points.get(i, 0) + 1
            applied_now = [p for _, p in keep]
            apply(applied_now, lr)
        pre = [p.detach().clone() for _, p in sorted(clients[0].model.named_parameters())]
        sent: list[tuple[int, Payload]] = []
        slices = base.step_slices(cfg, step)
        tokens = [data.get_samples(b) for b in slices]
        for i, (c, batch) in enumerate(zip(clients, slices, strict=True)):
            toks = tokens[i]
            if i in attackers and attack == "garbage":
                toks = torch.randint(0, 256, toks.shape, generator=gen)
            t = time.perf_counter()
            if i in trainers:  # a cheaper-work attacker: the real Trainer on less or worse data
                _, wire = cheap.train_cheaply(attack, trainers[i], c, toks, batch, step, lr,
                                              prev_lr)  # fmt: skip
                wire = bc.faked_commitments(wire, toks.shape[0])
            elif committing:  # a client of a verifying run: the Trainer, committing
                _, wire = cheap.train_cheaply("none", committing[i], c, toks, batch, step, lr,
                                              prev_lr)  # fmt: skip
            else:
                c.model.zero_grad(set_to_none=True)
                c.distro.lookahead(prev_lr)
                base.forward_backward(c.model, toks, 1.0)
                payload = c.distro.generate(
                    lr, prev_lr, c.prev_self, step=step, batch_start=batch.start,
                    batch_end=batch.end, trainer_nonce=c.nonce,
                )  # fmt: skip
                c.prev_self, c.nonce = payload, c.nonce + 1
                wire = decode_payload(encode_payload(payload, 2), spec)
            out.train_fwd_bwd_s += time.perf_counter() - t
            if i in ejected:
                continue
            if i in attackers and i not in trainers:
                if attack == "flip":
                    wire = flipped(wire)
                elif attack == "random":
                    wire = random_like(wire)
                elif attack == "cancel" and applied_now:
                    wire = flipped(applied_now[0])
                elif attack == "replay" and i in last_sent:
                    wire = last_sent[i]
                elif attack in cheap.COPIES:
                    source = cheap.copied_from(i, k, len(attackers))
                    wire = cheap.perturbed_copy(attack, wire, sent, source, gen)
                elif attack == "push":
                    if pushed is None:
                        pushed = random_like(wire)
                    n = names.index(PUSHED)
                    res = list(wire.results)
                    res[n] = pushed.results[n]
                    wire = Payload(wire.step, wire.batch_start, wire.batch_end,
                                   wire.trainer_nonce, wire.quantized, tuple(res))  # fmt: skip
            send(step, i, wire, sent, lr > 0 and prev_lr > 0)
        pending[step] = sent
        if vp and step >= 1 and step - 1 in pending:
            verify_round(step)
        step_tokens[step], step_pre[step] = tokens, pre
        step_tokens.pop(step - 2, None)
        step_pre.pop(step - 2, None)
        held.pop(step - 2, None)
    for s in sorted(pending):  # drain: the last steps land before the final evaluation
        keep = [(i, p) for i, p in pending[s] if i not in rejected.get(s, ())]
        for i, _ in keep:
            out.points[i] = out.points.get(i, 0) + 1
        apply([p for _, p in keep], lr_for_step(schedule, s + 2))
    base._check_agreement(clients)
    out.final_val = base.evaluate(clients[0].model, ws.val)
    return out


def sum_apply(distro: Any, payloads: Sequence[Any], lr: float) -> None:
    """`Distro.apply` with the peers' ±1 values summed instead of averaged over choosers."""
    import torch

    from psyche.distro import DistroResult, aggregate, decode_sign, sign_values

    if not payloads:
        return
    with torch.no_grad():
        for n, p in enumerate(distro._params):
            dense = None
            for payload in payloads:
                r = payload.results[n]
                one = DistroResult(r.idx, sign_values(r.val, torch.float32), r.xshape, r.totalk)
                d = aggregate([one], torch.float32, p.device, distinct=True)
                dense = d if dense is None else dense + d
            assert dense is not None
            p.sub_(decode_sign(dense).reshape(p.shape).to(p.dtype), alpha=lr)


if __name__ == "__main__":
    sys.exit(main())
