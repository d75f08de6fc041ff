"""docs/architecture.md's two pictures, generated rather than drawn (issue 27 item 7).

- **Layers**: a mermaid flowchart of the import rule that ``tests/unit/test_layering.py``
  enforces (its ``ALLOWED`` table), drawn with only the edges that are not implied by others
  (the transitive reduction), so the picture is the test's table and cannot drift from it.
- **Step hand-over**: a mermaid state diagram of the round engine's steps and what each hands
  the next, from :data:`HANDOVER` below (the engine's ``_enter``: ``daemon/engine.py``).

Each picture sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` markers in the doc.

    .venv/bin/python scripts/arch_diagrams.py          # rewrite the pictures in place
    .venv/bin/python scripts/arch_diagrams.py --check  # exit 1 naming a stale picture

``tests/unit/test_arch_diagrams.py`` runs the check.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
# Found by name: the tests may be rearranged into folders.
LAYERING = next(ROOT.glob("tests/**/test_layering.py"))

HANDOVER: tuple[tuple[str, str, str], ...] = (
    ("[*]", "Warmup", "a new epoch, its EpochView"),
    ("Warmup", "Training", "ModelKit (loaded, or fetched from peers)"),
    ("Training", "Witness", "the TrainingStep (RoundState, training task)"),
    ("Witness", "Training", "next round, the previous TrainingStep (stopped before the apply)"),
    ("Training", "Training", "states coalesced, the previous TrainingStep"),
    ("Training", "Cooldown", "last TrainingStep (training over before serving)"),
    ("Witness", "Cooldown", "last TrainingStep"),
    ("Cooldown", "[*]", "snapshot served, checkpoint saved, evals started"),
)
"""(from step, to step, what the step hands over): the engine's transitions. No colon in a
label: some renderers end a state diagram's label at the next one."""


def _allowed() -> dict[str, set[str]]:
    spec = importlib.util.spec_from_file_location("_layering", LAYERING)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table: dict[str, set[str]] = module.ALLOWED
    # "backends.base" and the like name part of a unit: the picture draws units.
    return {unit: {dep.split(".")[0] for dep in deps} - {unit} for unit, deps in table.items()}


def _reaches(graph: dict[str, set[str]], start: str, goal: str, skip: tuple[str, str]) -> bool:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        for nxt in graph.get(node, ()):
            if (node, nxt) == skip or nxt in seen:
                continue
            if nxt == goal:
                return True
            seen.add(nxt)
            stack.append(nxt)
    return False


def layers_diagram() -> str:
    graph = _allowed()
    edges = sorted(
        (a, b) for a, deps in graph.items() for b in deps if not _reaches(graph, a, b, (a, b))
    )
    lines = ["```mermaid", "flowchart BT"]
    lines += [f"    {a} --> {b}" for a, b in edges]
    lines += [f"    {u}" for u in sorted(graph) if not any(u in e for e in edges)]
    lines.append("```")
    return "\n".join(lines)


def handover_diagram() -> str:
    lines = ["```mermaid", "stateDiagram-v2"]
    lines += [f"    {a} --> {b}: {what}" for a, b, what in HANDOVER]
    lines.append("```")
    return "\n".join(lines)


PICTURES = {"layers": layers_diagram, "handover": handover_diagram}


def render(text: str) -> str:
    """``text`` with every picture's block replaced by its generated form."""
    for name, make in PICTURES.items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        head, found, rest = text.partition(begin)
        if not found or end not in rest:
            raise SystemExit(f"{DOC}: no {begin} … {end} markers")
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


def stale(text: str) -> list[str]:
    """The pictures whose block in ``text`` differs from the generated one."""
    fresh = render(text)
    out = []
    for name in PICTURES:
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if (
            text.partition(begin)[2].partition(end)[0]
            != fresh.partition(begin)[2].partition(end)[0]
        ):
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a picture is stale")
    args = p.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    if args.check:
        old = stale(text)
        if old:
            print(
                f"stale in {DOC}: {', '.join(old)}; run scripts/arch_diagrams.py", file=sys.stderr
            )
            return 1
        return 0
    DOC.write_text(render(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
