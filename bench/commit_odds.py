"""How soon per-sample commitments eject a free rider: the protocol's sampling and quorum, many
seeds, no training (issue 39 item 4).

A trainer that skipped a share `s` of its B samples fails a verifier's commitment check exactly
when that verifier's seed-chosen sample is one it skipped (an honest commitment agrees to
1.000000, any fake of a skipped sample stays below 0.999: bench/README.md, "Per-sample
commitments, measured"), so once its result is sampled, whether it is rejected is a matter of
which samples the verifiers draw and how many of them are honest. This replays that with the
protocol's functions: per round a fresh seed, `sampled_trainers(K, seed, vp)` picks the judged
results; the first 3 of a random order of the clients not yet ejected verify (as
`bench/byzantine.py`, whose order is a swap-or-not shuffle, uniform like this one); a result is
rejected, and its trainer ejected, when its honest verifiers' mismatch votes reach the quorum (a
majority of the verifiers and at least 2; attackers vote match). Draws: `distinct` (the daemon
today: the verifier at position p checks the p-th sample of one shuffle of the batch, so
verifiers check distinct samples) or `shared` (every verifier checks the commitment of the same
seed-chosen sample: an alternative that makes the votes on a skipped sample unanimous).

Cost, per client and round, in samples recomputed per sample trained: `sampled_count(K, vp)`
(⌈K·vp/100⌉, at most 16) × 3 × (1 / B) / K with one gradient per verifier and slot (the score
and the commitment sharing it: the daemon since "verifier: … recomputed at its trainer's
lookahead point"); `shared` needs a second gradient for the verifiers whose score sample
differs, so about twice that.

Usage: `python bench/commit_odds.py [--trials 1000] [--json PATH]`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

VERIFIERS = 3
ROUNDS = 10
CASES = ((4, 1), (8, 2), (16, 4), (64, 16))
"""(clients, attackers)."""
SKIPPED = ((1, 2), (3, 4), (7, 8))
"""Share of its batch a free rider skips, as (numerator, denominator)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=1000, help="runs of 10 rounds per cell")
    p.add_argument("--batch", type=int, default=8, help="samples per trainer (B)")
    p.add_argument("--vp", type=int, nargs="+", default=[25, 50])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.trials < 1 or args.batch < 2:
        p.error("--trials must be ≥ 1 and --batch ≥ 2")
    return args


def schedule(clients: int, vp: int, rng: random.Random) -> list[list[int]]:
    """The judged results of `ROUNDS` rounds, each with a fresh seed (the protocol's sampling)."""
    from psyche.coordinator.verification import sampled_trainers

    return [sampled_trainers(clients, rng.getrandbits(64), vp) for _ in range(ROUNDS)]


def ejected_within(
    clients: int,
    attackers: int,
    sampled: list[list[int]],
    trained: int,
    batch: int,
    draw: str,
    rng: random.Random,
) -> float:
    """The share of the attackers ejected within the rounds of `sampled` in one run."""
    bad = set(range(clients - attackers, clients))
    ejected: set[int] = set()
    for judged in sampled:
        order = rng.sample(range(clients), clients)  # the witnesses' election order
        verifiers = [i for i in order if i not in ejected][:VERIFIERS]
        for trainer in judged:
            if trainer not in bad or trainer in ejected:
                continue
            voters = [v for v in verifiers if v != trainer]
            honest = [v for v in voters if v not in bad]
            samples = rng.sample(range(batch), batch)  # one shuffle of the batch per slot
            against = sum(
                (samples[0] if draw == "shared" else samples[verifiers.index(v)]) >= trained
                for v in honest
            )
            if against >= len(verifiers) // 2 + 1 and against >= min(2, len(voters)):
                ejected.add(trainer)
    return len(ejected & bad) / attackers


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from psyche.coordinator.verification import sampled_count

    rng = random.Random(args.seed)
    rows = []
    print("| K (attackers) | vp | skipped | P(ejected ≤ 10 rounds), distinct | shared "
          "| recompute / trained, one gradient per verifier |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for clients, attackers in CASES:
        for vp in args.vp:
            cost = sampled_count(clients, vp) * VERIFIERS / (args.batch * clients)
            runs = [schedule(clients, vp, rng) for _ in range(args.trials)]
            for num, den in SKIPPED:
                trained = args.batch - args.batch * num // den
                got = {
                    draw: sum(
                        ejected_within(clients, attackers, run, trained, args.batch, draw, rng)
                        for run in runs
                    ) / args.trials
                    for draw in ("distinct", "shared")
                }  # fmt: skip
                rows.append({"clients": clients, "attackers": attackers, "vp": vp,
                             "skipped": f"{num}/{den}", "cost": round(cost, 4), **got})  # fmt: skip
                print(f"| {clients} ({attackers}) | {vp} | {num}/{den} | {got['distinct']:.3f} "
                      f"| {got['shared']:.3f} | {cost:.1%} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
