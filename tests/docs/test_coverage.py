"""Every command the documentation shows is run by a scene of ``tests/docs`` or listed with the
reason it cannot run here (fast: no command is run)."""

from __future__ import annotations

import re
from pathlib import Path

from .catalog import CANNOT_RUN_HERE, RUN_BY_CI, SCENES
from .conftest import ROOT
from .extract import block_commands, documented_commands, justfile_recipes, strip_comment


def scene_commands() -> dict[str, str]:
    return {text: scene for scene, texts in SCENES.items() for text in texts}


def test_every_documented_command_is_covered() -> None:
    run = scene_commands()
    listed = {**CANNOT_RUN_HERE, **RUN_BY_CI}
    missing = []
    for doc in documented_commands(ROOT):
        if doc.text in run or doc.text in listed:
            continue
        recipe = doc.text.removeprefix("just ")
        if doc.source == "justfile" and any(f"just {recipe}" in t for t in run):
            continue
        missing.append(f"{doc.source}: {doc.text}")
    assert not missing, (
        "documented commands no scene runs and no list excuses (tests/docs/catalog.py):\n"
        + "\n".join(missing)
    )


def test_no_catalog_entry_is_stale() -> None:
    shown = {doc.text for doc in documented_commands(ROOT)}
    stale = [t for t in [*scene_commands(), *CANNOT_RUN_HERE, *RUN_BY_CI] if t not in shown]
    assert not stale, f"catalog entries no document shows: {stale}"


def test_cannot_run_here_names_what_is_missing() -> None:
    lacks = ("Docker", "GPU", "internet", "validator")
    for text, why in CANNOT_RUN_HERE.items():
        assert any(word in why for word in lacks), (text, why)


def test_just_check_is_ci_lint_stage() -> None:
    """``just check`` (RUN_BY_CI) runs nothing scripts/test.sh does not: the same tools, on the
    paths test.sh checks."""
    recipe = (ROOT / "justfile").read_text().split("\ncheck:\n", 1)[1].split("\n\n", 1)[0]
    lines = [re.sub(r"\{\{ bin \}\}/", "", ln).split() for ln in recipe.strip().splitlines()]
    tools = {" ".join(words[:2]) if words[0] in ("ruff", "cargo") else words[0] for words in lines}
    ci = "".join((ROOT / "scripts" / f).read_text() for f in ("test.sh", "rust-test.sh"))
    for tool in tools:
        assert tool in ci, f"just check runs {tool}, which CI does not"
    assert "cargo fmt" in ci and "clippy" in ci and "mypy" in ci and "ruff format" in ci


def test_extraction_of_a_block() -> None:
    lines = [
        "# a comment line",
        "",
        "cmd one --flag 'a # not a comment'   # trailing comment",
        "cmd two --long \\",
        "    --continued value   # after the continuation",
        'X="$(cat k.json)" cmd three',
    ]
    got = [d.text for d in block_commands(lines, "doc.md", 10)]
    assert got == [
        "cmd one --flag 'a # not a comment'",
        "cmd two --long --continued value",
        'X="$(cat k.json)" cmd three',
    ]
    assert [d.source for d in block_commands(lines, "doc.md", 10)][1] == "doc.md:13"
    assert strip_comment("a#b # c") == "a#b"


def test_extraction_reads_shell_fences_only(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "```bash\nrun me\n```\n```python\nnot = 'me'\n```\n```\nnor me\n```\n~~~sh\nand me\n~~~\n"
    )
    (tmp_path / "justfile").write_text(
        'bin := "x"\n\ndefault:\n    @just --list\n\nrec run_id="a" *args=\'\':\n    echo\n'
    )
    assert [d.text for d in documented_commands(tmp_path)] == [
        "run me",
        "and me",
        "just default",
        "just rec",
    ]
    assert justfile_recipes(tmp_path / "justfile") == ["default", "rec"]
