"""Every command and option of every entry point, given missing, empty, blank, huge, negative,
non-numeric, non-finite, non-existent-path and non-ASCII values (and bad values of the variables
read outside any option), ends without a traceback (issue 28, item 1).

The walk (``walk_commands.py``) runs in one subprocess; what it found when it was first run, and
what was fixed, is in the issue's note: file names too long or unwritable in every command that
writes (now one line through ``psyche.cli.exit_codes.CliGroup``), ``--allowed-to-kill abc``,
``demo --clients -1`` (ran forever), ``--delegate-keypair`` pointing at a binary file, the
optional ``--run-id`` of ``json-dump-user`` past the seed limit, an empty ``--tokenizer``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

WALK = Path(__file__).with_name("walk_commands.py")

pytestmark = pytest.mark.slow


def test_no_command_answers_a_bad_value_with_a_traceback() -> None:
    res = subprocess.run([sys.executable, str(WALK)], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    findings = [line for line in lines if "problem" in line]
    assert not findings, "\n".join(json.dumps(f)[:400] for f in findings)
    assert lines[-1]["cases"] > 1500  # every command was reached
