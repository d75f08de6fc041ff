"""The README's troubleshooting table and docs/docker.md list every exit code the programs use
(issue 28: "the README's troubleshooting section lists every exit code")."""

from __future__ import annotations

import re
from pathlib import Path

from psyche.backends.solana.backend import EXIT_LEFT_RUN, EXIT_VERSION_MISMATCH
from psyche.cli import exit_codes

ROOT = Path(__file__).resolve().parents[3]


def _codes() -> set[int]:
    return {v for k, v in vars(exit_codes).items() if k.startswith("EXIT_")} | {64}


def _table_codes(text: str, heading: str) -> set[int]:
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    codes: set[int] = set()
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| Exit") and not line.startswith("|--"):
            first = line.split("|")[1]
            codes |= {int(n) for n in re.findall(r"\b\d+\b", first)}
    return codes


def test_the_backend_codes_are_the_cli_codes() -> None:
    assert exit_codes.EXIT_LEFT_RUN == EXIT_LEFT_RUN
    assert exit_codes.EXIT_VERSION_MISMATCH == EXIT_VERSION_MISMATCH


def test_the_readme_lists_every_exit_code() -> None:
    text = (ROOT / "README.md").read_text()
    assert _table_codes(text, "## Troubleshooting") >= _codes()


def test_docker_md_lists_every_client_exit_code() -> None:
    text = (ROOT / "docs" / "docker.md").read_text()
    assert _table_codes(text, "## Restarts and exit codes") >= _codes() - {64, 1}
