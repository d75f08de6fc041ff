"""`bench/byzantine.py` end to end: a short flipped-sign attack with verification on every
result ejects the attacker, takes nothing from the honest clients and writes the figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "byzantine.py"
LIMIT_S = 150


@pytest.mark.slow
def test_flip_attacker_is_ejected(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out.json"
    cmd = [sys.executable, str(SCRIPT), "--steps", "6", "--attack", "flip", "--verify", "100"]
    cmd += ["--json", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reap_children.append(proc)
    stdout, _ = proc.communicate(timeout=LIMIT_S)
    assert proc.returncode == 0, stdout.decode(errors="replace")[-2000:]
    (row,) = json.loads(out.read_text(encoding="utf-8"))
    assert row["attack"] == "flip" and row["verification_percent"] == 100
    assert "3" in row["ejected_at_step"] and row["ejected_at_step"]["3"] <= 3
    assert row["points"]["3"] < row["points"]["0"] == 6
    assert row["false_positives"] == 0 and row["honest_votes"] > 0
    assert row["attacker_scores"]["max"] < 0


def test_bad_arguments_exit_with_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--attackers", "4"], capture_output=True, timeout=60
    )
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr and b"--attackers" in proc.stderr
