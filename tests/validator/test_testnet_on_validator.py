"""The Solana local testnet on a real ``solana-test-validator`` (``--validator real``): 3 clients
train with one of them SIGKILLed and restarted, until 2 epochs have completed; every client
present holds identical weights after every apply, the killed client rejoins, and the
coordinator program executed the clients' transactions (``program-calls.json``, looked up on
the validator with ``getTransaction``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.test_solana_local_testnet import run_solana_testnet, solana_config

pytestmark = pytest.mark.slow


def test_three_clients_one_killed_and_rejoining_on_a_real_validator(
    tmp_path: Path, local_inputs: tuple[Path, Path]
) -> None:
    cfg = solana_config(tmp_path / "cfg", local_inputs, warmup_time=30, epoch_time=40,
                        total_steps=200)  # fmt: skip
    summary = tmp_path / "summary.json"
    rc, text = run_solana_testnet(
        cfg, tmp_path / "net", summary, "--epochs", "2", "--random-kill-num", "1",
        "--random-kill-interval", "50", "--allowed-to-kill", "3",
    )  # fmt: skip
    assert rc == 0, text[-4000:]
    s = json.loads(summary.read_text())
    assert s["epochs_completed"] >= 2, s["epochs"]
    assert "weights identical after every apply: True" in text
    assert all(len(set(r["model_hash"].values())) == 1 for r in s["rounds"]), s["rounds"]
    kills = [k for ep in s["epochs"] for k in ep["kills"]]
    assert kills, s["epochs"]
    tally = s["clients"]["client-3"]
    assert tally["joins"] == 1 + tally["kills"] >= 2, tally
    calls = json.loads((tmp_path / "net" / "program-calls.json").read_text())
    assert calls["not_found"] == 0, calls
    done = calls["calls"]["psyche_coordinator"]
    assert done["JoinRun"] >= 3, calls
    for name in ("Tick", "Witness", "WarmupWitness", "SetPeerAddrs"):
        assert done.get(name, 0) >= 1, (name, calls)
    assert (tmp_path / "net" / "logs" / "validator.log").exists()
