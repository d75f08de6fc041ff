"""The user documentation's configs and `just` recipes (issue 28, item 5), run as a user would:
`validate-config` on every shipped example config, and the justfile through the real `just`
binary (rust-just in .venv)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
JUST = BIN / "just"
DEV = ROOT / "config" / "consilience-match-llama2-20m-fineweb-pretrain-dev"


def run(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "state",
    [
        DEV / "state.toml",
        ROOT / "config" / "tiny" / "state.toml",
        ROOT / "config" / "tiny-solana" / "state.toml",
        ROOT / "config" / "tiny-solana-quick" / "state.toml",
        ROOT / "config" / "tiny-sparseloco" / "state.toml",
        ROOT / "config" / "tiny-solana-sparseloco" / "state.toml",
    ],
    ids=lambda p: p.parent.name,
)
def test_every_shipped_config_validates(state: Path) -> None:
    res = run(BIN / "psyche-centralized-server", "validate-config", "--state", state)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


def test_the_documented_dev_config_says_how_rounds_per_epoch_is_honoured() -> None:
    res = run(BIN / "psyche-centralized-server", "validate-config", "--state", DEV / "state.toml")
    lines = [ln for ln in res.stderr.splitlines() if "rounds_per_epoch" in ln]
    assert lines == [
        "warning: config.rounds_per_epoch = 20 became config.epoch_time = 606 (warmup_time + "
        "(20 - 2) x (max_round_train_time + round_witness_time)): epochs are timed now, so "
        "faster rounds fit more per epoch"
    ]


def test_just_lists_the_documented_recipes() -> None:
    res = run(JUST, "--list")
    assert res.returncode == 0, res.stderr
    for recipe in ("local-testnet", "setup-solana-localnet-test-run",
                   "start-training-localnet-client", "check", "fmt"):  # fmt: skip
        assert recipe in res.stdout


@pytest.mark.parametrize(
    ("recipe", "command"),
    [
        ("setup-solana-localnet-test-run", "psyche-solana-local-testnet start --run-id myrun"),
        ("start-training-localnet-client", "psyche-solana-client train --rpc"),
    ],
)
def test_the_documented_run_id_form_reaches_the_command(recipe: str, command: str) -> None:
    res = run(JUST, "--dry-run", recipe, "run_id=myrun")
    assert res.returncode == 0, res.stderr
    assert command in res.stderr and "--run-id myrun" in res.stderr


@pytest.mark.parametrize(
    "recipe", ["setup-solana-localnet-test-run", "start-training-localnet-client"]
)
def test_a_run_id_too_long_for_the_program_is_one_line_and_exit_2(recipe: str) -> None:
    res = run(JUST, recipe, "run_id=" + "r" * 33)
    assert res.returncode != 0
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "at most 32 bytes" in errors[0], res.stderr
    assert "exit code 2" in res.stderr
    assert "Traceback" not in res.stderr


def test_local_testnet_recipe_reaches_the_launcher() -> None:
    res = run(JUST, "local-testnet", "--help")
    assert res.returncode == 0, res.stderr
    assert "--config-path" in res.stdout and "--num-clients" in res.stdout


def test_a_signal_to_just_stops_the_client_it_started(tmp_path: Path) -> None:
    """`kill` of a `just start-training-localnet-client` (a supervisor, a script) must stop the
    client: the recipe `exec`s it, where the shell between them used to die alone and leave the
    client running. Here the client is retrying an RPC endpoint that does not answer."""
    from solders.keypair import Keypair

    wallet = tmp_path / "id.json"
    wallet.write_text(json.dumps(list(bytes(Keypair()))))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        rpc = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nobody answers there
    env = {**os.environ, "RPC": rpc, "WALLET_FILE": str(wallet), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [str(JUST), "start-training-localnet-client", "run_id=x", "--logs", "console"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "retrying in" in line:
                break
        proc.send_signal(signal.SIGTERM)  # to just alone, as `kill PID` does
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 143, "".join(seen) + out
        # A clean stop (the p2p child, the event log) takes well under a second idle but tens of
        # seconds at a load of 30 on 2 cores: the test is about whether it ends, not how fast.
        deadline = time.monotonic() + 60
        while (left := _group(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"still running after just stopped: {left}"
        assert "Traceback" not in "".join(seen) + out
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _group(pgid: int) -> list[str]:
    res = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True)
    return res.stdout.split()
