"""Every command line's ``print-all-help --markdown`` is the committed snapshot under
``help_snapshots/``: a refactor that moves code (issue 27) must not change what users read, and a
deliberate change of a flag shows up here as a diff to review. Regenerate after such a change with
``PSYCHE_WRITE_HELP_SNAPSHOTS=1 pytest tests/unit/cli/test_help_snapshots.py``."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from .programs import PROGRAMS

SNAPSHOTS = Path(__file__).with_name("help_snapshots")
ROOT = Path(__file__).resolve().parents[3]
"""The checkout, which some defaults name (``--config-path``): written as ``<repo>``."""


@pytest.mark.parametrize(("group", "prog"), PROGRAMS, ids=[p for _, p in PROGRAMS])
def test_print_all_help_is_the_snapshot(group: click.Group, prog: str) -> None:
    # A fixed width: the markdown must not depend on the terminal the tests run in.
    res = CliRunner().invoke(group, ["print-all-help", "--markdown"], terminal_width=100)
    assert res.exit_code == 0, res.output
    text = res.output.replace(str(ROOT), "<repo>")
    path = SNAPSHOTS / f"{prog}.md"
    if os.environ.get("PSYCHE_WRITE_HELP_SNAPSHOTS") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{prog}: help differs from {path}"
