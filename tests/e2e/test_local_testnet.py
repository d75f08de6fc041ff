"""End to end with real processes on 127.0.0.1: a server, client daemons, libp2p, the data server.

Each test runs a whole (short) run through the local testnet and checks the summary it writes:
rounds end opportunistically, every client holds identical weights after every apply, the loss
falls, a crashed client is ejected by health checks, a late joiner trains from the next epoch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from psyche.events import read_events
from psyche.testnet.launcher import Testnet, TestnetOptions, make_testnet

from .conftest import free_port, make_config

pytestmark = pytest.mark.slow


def hashes_agree(rounds: list[dict]) -> bool:
    return all(len(set(r["model_hash"].values())) <= 1 for r in rounds)


def test_three_clients_finish_an_epoch_with_identical_weights(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    cfg = make_config(tmp_path / "cfg", local_inputs, data_port=free_port(), total_steps=9)
    summary = tmp_path / "summary.json"
    cmd = [
        sys.executable,
        "-m",
        "psyche.cli.main",
        "centralized-local-testnet",
        "start",
        "--config-path",
        str(cfg),
        "--server-port",
        str(free_port()),
        "--tui",
        "false",
        "--out",
        str(tmp_path / "net"),
        "--summary",
        str(summary),
        "--timeout",
        "400",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reap_children.append(proc)
    out, _ = proc.communicate(timeout=450)
    assert proc.returncode == 0, out.decode()[-3000:]
    s = json.loads(summary.read_text())
    rounds = s["rounds"]
    assert s["epochs_completed"] == 1 and s["final_state"] == "Finished"
    assert len(rounds) >= 6
    assert all(r["end_reason"] == "opportunistic" for r in rounds), rounds
    assert hashes_agree(rounds)
    assert all(len(r["model_hash"]) == 3 for r in rounds)
    trained = [r for r in rounds if r["loss"]]
    first, last = trained[0]["loss"], trained[-1]["loss"]
    assert sum(last.values()) / 3 < 0.85 * sum(first.values()) / 3
    assert summary.with_suffix(".png").stat().st_size > 1000


def _run(net: Testnet, hook) -> dict:
    return net.run(hook).to_json()


def _states(net: Testnet) -> list[dict]:
    return net.states()


def test_killed_client_is_ejected_by_health_checks_and_the_run_continues(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    cfg = make_config(
        tmp_path / "cfg",
        local_inputs,
        data_port=free_port(),
        total_steps=14,
        witness_nodes=0,
        max_round_train_time=8,
        epoch_time=400,
    )
    opts = TestnetOptions(
        config_path=cfg,
        num_clients=3,
        server_port=free_port(),
        out_dir=tmp_path / "net",
        timeout_s=400,
        server_args=("--withdraw-on-disconnect", "false"),
    )
    net = make_testnet(opts, lambda m: None)
    killed_at: list[int] = []

    def hook(n: Testnet) -> None:
        states = _states(n)
        if (
            not killed_at
            and states
            and states[-1]["run_state"] in ("RoundTrain", "RoundWitness")
            and states[-1]["step"] >= 3
        ):
            killed_at.append(states[-1]["step"])
            n.kill_client("client-3")

    s = _run(net, hook)
    assert killed_at, "the run ended before the kill"
    victim = next(iter(read_events(net.client_log("client-3"))))["client"]
    seen = [e["clients"].get(victim) for e in _states(net)]
    assert "Ejected" in seen, "the crashed client was never ejected by a health check"
    assert s["final_state"] == "Finished"
    after = [r for r in s["rounds"] if r["step"] > killed_at[0] + 3]
    assert after and all(r["loss"] for r in after if r["height"] < 100 and r["loss"])
    assert hashes_agree(s["rounds"])
    assert s["clients"]["client-3"]["kills"] == 1 and s["clients"]["client-3"]["drops"] >= 1
    # Once the crashed client has left, rounds end early again.
    assert any(r["end_reason"] == "opportunistic" for r in after)


def test_late_joiner_trains_from_the_next_epoch_with_identical_weights(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    cfg = make_config(
        tmp_path / "cfg",
        local_inputs,
        data_port=free_port(),
        total_steps=200,
        epoch_time=40,
        warmup_time=15,
        cooldown_time=10,
        max_round_train_time=10,
    )
    opts = TestnetOptions(
        config_path=cfg,
        num_clients=3,
        server_port=free_port(),
        out_dir=tmp_path / "net",
        timeout_s=500,
        epochs=2,
        # Short: checkpoint paths must fit the coordinator's 64-byte repo id.
        checkpoint_dir=Path(tempfile.mkdtemp(prefix="psyche-ck-")),
    )
    net = make_testnet(opts, lambda m: None)

    def hook(n: Testnet) -> None:
        states = _states(n)
        if (
            "client-4" not in n.clients
            and states
            and states[-1]["run_state"] != "WaitingForMembers"
        ):
            n.start_client(4)

    s = _run(net, hook)
    assert s["epochs_completed"] >= 2
    joiner = read_events(net.client_log("client-4"))
    trains = [e for e in joiner if e["event"] == "train"]
    first_epoch_last_step = max(r["step"] for r in s["rounds"] if r["epoch"] == 0)
    assert trains and min(e["step"] for e in trains) > first_epoch_last_step
    later = [r for r in s["rounds"] if r["epoch"] == 1]
    assert later and all("client-4" in r["model_hash"] for r in later)
    assert hashes_agree(s["rounds"])
