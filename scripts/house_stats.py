"""How big the house is: the before/after table of issue 27, measured the same way every time.

usage: python scripts/house_stats.py [--root client/psyche] [--json]

Counts Python modules under the root (not ``__pycache__``), their lines, the modules over 400
lines, the functions over 60 lines (a function's span from its ``def`` to its last statement,
nested functions counted on their own) and the five largest modules. Parsing, not importing, so it
runs without the project's dependencies.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="client/psyche", help="folder to measure")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
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
