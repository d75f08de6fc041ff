"""How big the house is: the before/after table of issue 27, measured the same way every time.

usage: python scripts/house_stats.py [--root client/psyche] [--json] [--before REV]

Counts Python modules under the root (not ``__pycache__``), their lines, the modules over 400
lines, the functions over 60 lines (a function's span from its ``def`` to its last statement,
nested functions counted on their own) and the five largest modules. Parsing, not importing, so it
runs without the project's dependencies.

``--before REV`` prints the before/after table instead: the same figures for the commit REV (its
tree extracted with ``git archive``) and for the working tree, plus the pairs of repeated places
that the workplace's ``duplicates`` command finds in ``client/``, ``programs/`` and ``tests/``
(when that command is installed).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULE_LINES = 400
FUNCTION_LINES = 60


@dataclass
class HouseStats:
    root: str
    modules: int = 0
    lines: int = 0
    modules_over_400: list[tuple[str, int]] = field(default_factory=list)
    functions_over_60: list[tuple[str, int]] = field(default_factory=list)
    largest: list[tuple[str, int]] = field(default_factory=list)


def function_spans(tree: ast.AST) -> list[tuple[str, int]]:
    spans: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            end = node.end_lineno or node.lineno
            spans.append((node.name, end - node.lineno + 1))
    return spans


def measure(root: Path) -> HouseStats:
    stats = HouseStats(root=str(root.relative_to(REPO)) if root.is_relative_to(REPO) else str(root))
    sizes: list[tuple[str, int]] = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        n = len(text.splitlines())
        rel = str(path.relative_to(root))
        sizes.append((rel, n))
        stats.modules += 1
        stats.lines += n
        if n > MODULE_LINES:
            stats.modules_over_400.append((rel, n))
        for name, span in function_spans(ast.parse(text, filename=str(path))):
            if span > FUNCTION_LINES:
                stats.functions_over_60.append((f"{rel}:{name}", span))
    stats.largest = sorted(sizes, key=lambda s: -s[1])[:5]
    stats.modules_over_400.sort(key=lambda s: -s[1])
    stats.functions_over_60.sort(key=lambda s: -s[1])
    return stats


TREES = ("client", "programs", "tests")
"""Where the repeated places are counted."""


def duplicate_pairs(tree: Path) -> int | None:
    """The pairs of places ``duplicates`` reports under ``tree`` (None without the command)."""
    if shutil.which("duplicates") is None:
        return None
    out = subprocess.run(
        ["duplicates", "--repo", str(tree), "--most", "1", "--seconds", "120"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    m = re.search(r"^(\d+) pairs? of places", out, re.MULTILINE)
    return int(m.group(1)) if m else 0


def snapshot(rev: str, into: Path) -> Path:
    """REV's tree (``git archive``), extracted under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def before_after(rev: str, root: str) -> str:
    """The issue's table, as markdown: REV against the working tree."""
    with tempfile.TemporaryDirectory(prefix="house-before-") as tmp:
        old_tree = snapshot(rev, Path(tmp))
        old, new = measure(old_tree / root), measure(REPO / root)
        dups = {t: (duplicate_pairs(old_tree / t), duplicate_pairs(REPO / t)) for t in TREES}

    def top(s: HouseStats) -> str:
        return ", ".join(f"{name} {n}" for name, n in s.largest)

    rows = [
        ("modules", old.modules, new.modules),
        ("lines", old.lines, new.lines),
        (f"modules > {MODULE_LINES} lines", len(old.modules_over_400), len(new.modules_over_400)),
        (
            f"functions > {FUNCTION_LINES} lines",
            len(old.functions_over_60),
            len(new.functions_over_60),
        ),
        ("largest five", top(old), top(new)),
    ]
    rows += [(f"`duplicates` pairs in {t}/", *dups[t]) for t in TREES]
    lines = [f"| {root} | before ({rev}) | after (working tree) |", "|---|---|---|"]
    lines += [f"| {name} | {a} | {b} |" for name, a, b in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="client/psyche", help="folder to measure")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--before", metavar="REV", help="the before/after table against REV")
    args = parser.parse_args(argv)
    if args.before is not None:
        try:
            print(before_after(args.before, args.root))
        except subprocess.CalledProcessError as e:
            print(
                f"house_stats: git archive {args.before} failed: {e.stderr.decode()}",
                file=sys.stderr,
            )
            return 2
        return 0
    root = (REPO / args.root).resolve()
    if not root.is_dir():
        print(f"house_stats: {args.root} is not a folder", file=sys.stderr)
        return 2
    stats = measure(root)
    if args.json:
        print(json.dumps(asdict(stats), indent=2))
        return 0
    print(f"{stats.root}: {stats.modules} modules, {stats.lines} lines")
    print(f"modules > {MODULE_LINES} lines: {len(stats.modules_over_400)}")
    for name, n in stats.modules_over_400:
        print(f"  {n:5d}  {name}")
    print(f"functions > {FUNCTION_LINES} lines: {len(stats.functions_over_60)}")
    for name, n in stats.functions_over_60:
        print(f"  {n:5d}  {name}")
    print("largest five:")
    for name, n in stats.largest:
        print(f"  {n:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
