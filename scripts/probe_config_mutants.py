"""Feed `validate-config` N seeded mutants of a shipped state file; count how each one ends.

Every mutant must end in one of two ways: accepted (exit 0) or one line naming the problem
(exit 1, ``invalid config: …``, for a rule it breaks; exit 2, ``error: --state …``, for a file
that is not UTF-8 or not TOML at all, as every command answers a malformed file: issue 42). A
Python traceback, or an error over several lines, is a bug in the loader. The issue's example: a
state file that is not UTF-8 raised UnicodeDecodeError.

    .venv/bin/python scripts/probe_config_mutants.py [-n 2000] [--seed 5] [--state FILE]

Runs in-process (click's CliRunner), against whichever `psyche` is importable: to measure another
checkout, put its `client/` first on PYTHONPATH. `tests/unit/cli/test_validate_config_rules.py`
imports `mutate` and `classify` from here, so the probe and the test judge mutants the same way.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny" / "state.toml"

# Values a careless edit (or a hostile file) puts where a number, string or table belongs.
VALUES = [
    b"nan", b"inf", b"-inf", b"-1", b"0", b"1e39", b"1.5", b"-0.5", b"true", b"[]", b"{}",
    b'"x"', b'"[/]"', b'"a:b"', b'"Bogus"', b"1979-05-27", b"99999999999999999999999",
    b'"\\u0000"', b'"http://h/{}"', b"1e-50",
]  # fmt: skip


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random edit: byte flips, a truncation, a deleted or inserted run of bytes, a duplicated
    line, or a `key = value` line whose value is replaced by one of `VALUES`."""
    out = bytearray(data)
    op = rng.randrange(6)
    if op == 0:
        for _ in range(rng.randint(1, 3)):
            out[rng.randrange(len(out))] = rng.randrange(256)
    elif op == 1:
        del out[rng.randrange(len(out)) :]
    elif op == 2:
        i = rng.randrange(len(out))
        del out[i : i + rng.randint(1, 20)]
    elif op == 3:
        i = rng.randrange(len(out) + 1)
        out[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    else:
        lines = bytes(out).split(b"\n")
        i = rng.randrange(len(lines))
        if op == 4:
            lines.insert(i, lines[i])
        else:
            assignments = [j for j, line in enumerate(lines) if b" = " in line]
            j = rng.choice(assignments)
            key = lines[j].split(b" = ", 1)[0]
            lines[j] = key + b" = " + rng.choice(VALUES)
        out = bytearray(b"\n".join(lines))
    return bytes(out)


def classify(data: bytes, path: Path) -> tuple[str, str]:
    """("accepted" | "error" | "unclear" | "traceback", detail) for one file's contents."""
    from psyche.cli.server import server

    path.write_bytes(data)
    result = CliRunner().invoke(server, ["validate-config", "--state", str(path)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback", f"{type(result.exception).__name__}: {result.exception}"
    if result.exit_code == 0:
        return "accepted", ""
    lines = result.stderr.strip().splitlines()
    one_line = {1: "invalid config: ", 2: "error: --state "}.get(result.exit_code)
    if one_line is not None and len(lines) == 1 and lines[0].startswith(one_line):
        return "error", lines[0]
    return "unclear", f"exit {result.exit_code}: {result.stderr!r}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=2000, help="mutants (default 2000)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--state", type=Path, default=TINY, help="file to mutate (config/tiny)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every bad outcome")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    base = args.state.read_bytes()
    counts: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.toml"
        for i in range(args.n):
            outcome, detail = classify(mutate(base, rng), path)
            counts[outcome] += 1
            if outcome in ("traceback", "unclear"):
                kinds[detail.split(":", 1)[0]] += 1
                if args.verbose:
                    print(f"mutant {i}: {outcome}: {detail[:200]}", file=sys.stderr)
    print(f"{args.n} mutants of {args.state.name} (seed {args.seed}):")
    for outcome in ("accepted", "error", "unclear", "traceback"):
        print(f"  {outcome:9} {counts[outcome]}")
    for kind, n in kinds.most_common():
        print(f"    {n:5}  {kind}")


if __name__ == "__main__":
    main()
