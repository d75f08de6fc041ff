"""The shell commands the documentation shows: every line of a ``bash``/``sh``/``shell``/
``console`` fenced block in README.md and docs/*.md, and every recipe of the justfile.

A command is one logical line: backslash continuations are joined with one space, a comment
(``#`` at the start of a word, outside quotes) is dropped, blank lines and comment lines are
skipped. The text is the key the catalog (``tests/docs/catalog.py``) names it by, so a command
whose text changes, or a new one, is a command without coverage until the catalog says how it
runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL_FENCES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
RECIPE = re.compile(r"^([A-Za-z_][\w-]*)(\s[^:]*)?:(?!=)")


@dataclass(frozen=True, slots=True)
class Documented:
    source: str
    """``FILE:LINE`` of the command's first line."""
    text: str


def strip_comment(line: str) -> str:
    """``line`` without its trailing comment (a ``#`` that starts a word outside quotes)."""
    quote = ""
    prev = " "
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                continue
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev.isspace():
            return line[:i].rstrip()
        prev = ch
    return line.rstrip()


def block_commands(lines: list[str], source: str, first_line: int) -> list[Documented]:
    out: list[Documented] = []
    pending = ""
    start = first_line
    for n, raw in enumerate(lines, start=first_line):
        line = raw.rstrip()
        if not pending:
            start = n
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        text = strip_comment((pending + line.strip()) if pending else line)
        pending = ""
        text = " ".join(text.split()) if "\n" in text else text.strip()
        text = re.sub(r" {2,}", " ", text)
        if text:
            out.append(Documented(f"{source}:{start}", text))
    return out


def markdown_commands(path: Path, root: Path) -> list[Documented]:
    """The commands of ``path``'s shell blocks, in order."""
    out: list[Documented] = []
    lines = path.read_text().splitlines()
    rel = path.relative_to(root).as_posix()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[:3]):
            j += 1
        if lang in SHELL_FENCES:
            out += block_commands(lines[i + 1 : j], rel, i + 2)
        i = j + 1
    return out


def justfile_recipes(path: Path) -> list[str]:
    """The recipe names of a justfile (``default`` included)."""
    names = []
    for line in path.read_text().splitlines():
        if not line or line[0] in " \t#":
            continue
        m = RECIPE.match(line)
        if m and not line.startswith(("set ", "export ", "import ")):
            names.append(m.group(1))
    return names


def documented_commands(root: Path) -> list[Documented]:
    """Every command shown in README.md and docs/*.md, then ``just RECIPE`` per recipe."""
    out = markdown_commands(root / "README.md", root)
    for doc in sorted((root / "docs").glob("*.md")):
        out += markdown_commands(doc, root)
    out += [Documented("justfile", f"just {name}") for name in justfile_recipes(root / "justfile")]
    return out
