"""The default job end to end: `psyche demo` trains a tiny model with 3 simulated clients."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_run_trains_with_identical_weights_and_writes_plot(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "psyche.cli.main", "demo", "--out", str(out), "--tokens", "120000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    reap_children.append(proc)
    stdout, _ = proc.communicate(timeout=400)
    text = stdout.decode()
    assert proc.returncode == 0, text
    summary = json.loads((out / "summary.json").read_text())
    rounds = summary["rounds"]
    assert summary["epochs_completed"] == 1 and summary["final_state"] == "Finished"
    assert len(rounds) >= 6
    assert all(r["hashes_agree"] for r in rounds)
    assert all(r["end_reason"] == "opportunistic" for r in rounds)
    # Two drain rounds at the end apply the last two trained rounds (no lost results).
    assert [r["trained"] for r in rounds[-2:]] == [False, False]
    assert all(r["applied_batches"] > 0 for r in rounds[2:])
    assert summary["final_loss"] < summary["first_loss"] * 0.8
    assert (out / "loss.png").stat().st_size > 1000
    assert summary["checkpoints"] and Path(summary["checkpoints"][0], "config.json").exists()
