"""The documented localnet recipes, run as a user runs them (issue 28, item 5):
``just setup-solana-localnet-test-run run_id=…`` starts the local SVM, creates and starts the run
with one client of its own and a wallet for a joiner, and ``just start-training-localnet-client
run_id=…`` (in another terminal: another process group here) joins it as the second client the
run needs. Both go through the real ``just`` binary and the justfile, the run configured by
config/tiny-solana-quick (``CONFIG_PATH``). The test sees the joiner train every round with the
launcher's client until the run finishes, and both stop by themselves, cleanly."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from support.net import free_port

from .conftest import ROOT

QUICK = ROOT / "config" / "tiny-solana-quick"
JUST = Path(sys.executable).parent / "just"
RUN_ID = "just-localnet"

pytestmark = pytest.mark.slow


def quick_config(out: Path, inputs: tuple[Path, Path]) -> Path:
    model, data = inputs
    text = (QUICK / "state.toml").read_text()
    text = text.replace('repo_id = "runs/tiny/model"', f'repo_id = "{model}"')
    text = text.replace('Local = "runs/tiny/data"', f'Local = "{data}"')
    out.mkdir(parents=True, exist_ok=True)
    (out / "state.toml").write_text(text)
    return out


def lines_of(stream: IO[str], into: queue.Queue[str], keep: list[str]) -> None:
    for line in stream:
        keep.append(line)
        into.put(line)


def start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [str(JUST), *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    return proc, []


def test_the_two_localnet_recipes_train_a_run_together(
    tmp_path: Path, local_inputs: tuple[Path, Path]
) -> None:
    cfg = quick_config(tmp_path / "cfg", local_inputs)
    out = tmp_path / "net"
    launcher, launcher_out = start(
        ["setup-solana-localnet-test-run", f"run_id={RUN_ID}", "--num-clients", "1",
         "--joiners", "1", "--epochs", "1", "--tui", "false", "--out", str(out),
         "--summary", str(tmp_path / "summary.json"), "--rpc-port", str(free_port()),
         "--timeout", "240"],
        {"CONFIG_PATH": str(cfg)},
    )  # fmt: skip
    seen: queue.Queue[str] = queue.Queue()
    assert launcher.stdout is not None
    threading.Thread(
        target=lines_of, args=(launcher.stdout, seen, launcher_out), daemon=True
    ).start()
    joiner: subprocess.Popen[str] | None = None
    joiner_out: list[str] = []
    try:
        deadline = time.monotonic() + 120
        command = None
        while command is None:
            try:
                line = seen.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail("no joiner command within 120 s:\n" + "".join(launcher_out))
            command = re.search(
                r"joiner 1: RPC=(\S+) WALLET_FILE=(\S+) AUTHORIZER=(\S+) "
                rf"just start-training-localnet-client run_id={RUN_ID}",
                line,
            )
        rpc, wallet, authorizer = command.groups()
        # What the printed line says, plus the testnet's loopback P2P.
        joiner, joiner_out = start(
            ["start-training-localnet-client", f"run_id={RUN_ID}", "--bind-p2p-host",
             "127.0.0.1", "--logs", "console"],
            {"RPC": rpc, "WALLET_FILE": wallet, "AUTHORIZER": authorizer, "PSYCHE_DEVICE": "cpu",
             "COLUMNS": "200"},
        )  # fmt: skip
        assert joiner.stdout is not None
        threading.Thread(
            target=lines_of, args=(joiner.stdout, queue.Queue(), joiner_out), daemon=True
        ).start()
        launcher.wait(timeout=240)
        launcher_text = "".join(launcher_out)
        assert launcher.returncode == 0, launcher_text[-4000:]
        # The run needed both clients to start (init_min_clients = 2) and reached its last step.
        assert re.search(r"epoch 0 step +3 ", launcher_text), launcher_text[-4000:]
        # The joiner trained the run's rounds with the launcher's client, then saw it finish and
        # stopped by itself (exit 0), with no error on the way.
        rc = joiner.wait(timeout=60)
        text = "".join(joiner_out)
        assert rc == 0, text[-4000:]
        assert "joined epoch 0" in text, text[-4000:]
        assert re.search(r"INFO +step 1 . loss", text) and re.search(r"INFO +step 2 . loss", text)
        assert f"run {RUN_ID!r} finished" in text, text[-4000:]
        assert " ERROR " not in text and "Traceback" not in text, text[-4000:]
    finally:
        for proc in (launcher, joiner):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        print("launcher:\n" + "".join(launcher_out)[-3000:])
        print("joiner:\n" + "".join(joiner_out)[-3000:])
