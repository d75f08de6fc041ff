"""The run explorer as a person uses it, on the centralized local testnet: a real headless
Chromium watches ``psyche-centralized-local-testnet start --explorer PORT`` train a short run (2
clients): the runs list shows the run, the run page's phase changes while the browser watches,
and the loss chart ends with one point per trained step of ``summary.json``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import free_port, make_config
from .explorer_browser import assert_progress_agrees, chromium_or_skip, wait_for_url, watch

pytestmark = pytest.mark.slow


def test_the_explorer_shows_a_centralized_run_live(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    chromium_or_skip()
    cfg = make_config(
        tmp_path / "cfg", local_inputs, data_port=free_port(), total_steps=5,
        init_min_clients=2, min_clients=2, warmup_time=30, max_round_train_time=8,
    )  # fmt: skip
    net, summary = tmp_path / "net", tmp_path / "summary.json"
    cmd = [
        sys.executable, "-m", "psyche.cli.main", "centralized-local-testnet", "start",
        "--config-path", str(cfg), "--num-clients", "2", "--tui", "false", "--out", str(net),
        "--summary", str(summary), "--timeout", "300", "--explorer", str(free_port()),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reap_children.append(proc)
    url = wait_for_url(net, proc)
    seen = watch(url, "tiny", "centralized", lambda: proc.poll() is not None)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out.decode()[-3000:]
    assert f"explorer: {url}" in out.decode()
    assert len(seen.phases) >= 3, seen.phases
    assert seen.phases[-1] == "Finished", seen.phases
    trained = [r for r in json.loads(summary.read_text())["rounds"] if r["loss"]]
    steps = [(s["step"], s["reports"]) for s in seen.steps]
    assert trained and seen.loss_points == len(trained), ([r["step"] for r in trained], steps)
    assert all(p.stat().st_size > 10_000 for p in seen.shots)
    assert_progress_agrees(seen, len(trained), total_steps=5, finished=True)
    # The rounds timeline agrees with the summary on how each round ended.
    summary_end = {r["step"]: r["end_reason"] for r in json.loads(summary.read_text())["rounds"]}
    shown_end = {
        r["step"]: "opportunistic" if r["opportunistic"] else "timeout"
        for r in seen.rounds
        if r["witness_at"] is not None and r["trained"]
    }
    assert shown_end and all(summary_end[s] == e for s, e in shown_end.items()), (
        summary_end,
        shown_end,
    )
