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
    assert row["left_out"]["honest"] == 0  # the apply's agreement filter spared every honest one


@pytest.mark.slow
def test_a_free_rider_is_ejected_by_its_commitments(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    """`--commitments --score-at-point`: the free rider on half its batch passes the score but
    not its commitments; honest commitments agree exactly (seeded: the same run every time)."""
    out = tmp_path / "out.json"
    cmd = [sys.executable, str(SCRIPT), "--steps", "8", "--attack", "fr2", "--verify", "100"]
    cmd += ["--batch", "8", "--verify-samples", "1", "--escalate", "4", "--measure", "captured"]
    cmd += ["--commitments", "--score-at-point", "--json", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reap_children.append(proc)
    stdout, _ = proc.communicate(timeout=LIMIT_S)
    assert proc.returncode == 0, stdout.decode(errors="replace")[-2000:]
    (row,) = json.loads(out.read_text(encoding="utf-8"))
    assert "3" in row["ejected_at_step"] and row["points"]["3"] < row["points"]["0"] == 8
    assert row["false_positives"] == 0 and row["commitment"]["honest"]["min"] > 0.9999
    assert row["commitment"]["attacker_below_threshold"] >= 2


@pytest.mark.slow
def test_sparseloco_free_rider_is_ejected_by_the_audit(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    """`--optimizer sparseloco --verify 100`: a ½-work free rider's committed chain fails the
    replayed inner step at its first round (rejected, no point, ejected), and no honest result
    is accused (bench/byzantine_sparseloco_audit.py)."""
    out = tmp_path / "out.json"
    cmd = [sys.executable, str(SCRIPT), "--optimizer", "sparseloco", "--steps", "8"]
    cmd += ["--attack", "fr2", "--verify", "100", "--json", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reap_children.append(proc)
    stdout, _ = proc.communicate(timeout=LIMIT_S)
    assert proc.returncode == 0, stdout.decode(errors="replace")[-2000:]
    (row,) = json.loads(out.read_text(encoding="utf-8"))
    assert row["attack"] == "fr2" and row["verification_percent"] == 100
    assert row["ejected_at_step"] == {"3": 1}
    assert "3" not in row["points"] and row["points"]["0"] == 2
    assert row["false_positives"] == 0 and row["honest_votes"] > 0
    assert row["audit_findings"]["attacker: inner step"] >= 2


def test_bad_arguments_exit_with_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--attackers", "4"], capture_output=True, timeout=60
    )
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr and b"--attackers" in proc.stderr
