"""SIGTERM to ``psyche-solana-client train`` while it waits for an RPC endpoint that does not
answer is a clean stop: exit 143 and the documented "terminated (SIGTERM); shut down cleanly"
(issue 42, item 5: the handler was installed only after the run was read, so the signal killed
the client where it stood, without the line)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from solders.keypair import Keypair

from support.net import free_port

BIN = Path(sys.executable).parent
DROP = ("RAW_", "WALLET_", "RUN_ID", "RPC", "WS_RPC", "AUTHORIZER", "PSYCHE_", "BIND_P2P")

pytestmark = pytest.mark.slow


def test_sigterm_while_waiting_for_an_unreachable_rpc_is_a_clean_stop(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROP)}
    env |= {"COLUMNS": "400", "RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(Keypair())))}
    argv = [str(BIN / "psyche-solana-client"), "train", "--run-id", "unreachable"]
    argv += ["--rpc", f"http://127.0.0.1:{port}", "--device", "cpu", "--logs", "console"]
    client = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert client.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 120
    try:
        for line in client.stdout:
            seen.append(line)
            if "no RPC endpoint answered" in line and "retrying in" in line:
                break
            assert time.monotonic() < deadline, "".join(seen)
        client.send_signal(signal.SIGTERM)
        out, _ = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    text = "".join(seen) + out
    assert client.returncode == 143, text
    assert "terminated (SIGTERM); shut down cleanly" in text
    assert "Traceback" not in text and " ERROR " not in text, text
