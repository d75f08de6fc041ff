"""A client whose libp2p host process dies says so, stops, and exits with code 1.

Before, it went on without its host: deaf to gossip and unable to announce, it would have sat
out every epoch while holding its place in the run, and a supervisor saw nothing wrong. Exit 1
is a run-time failure, which the image's entrypoint restarts (docs/docker.md, "Restarts and
exit codes"). Real processes: the server, the client and its host child, which the test kills.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.net import free_port

from .helpers import start_server, write_state

BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_client_whose_p2p_host_dies_stops_with_exit_code_1(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    # Two members needed: the lone client waits in WaitingForMembers, its P2P node up.
    state = write_state(tmp_path / "state.toml", init_min_clients=2)
    start_server(reap_children, state, port, log=tmp_path / "server.log")
    argv = [str(BIN / "psyche-centralized-client"), "train", "--run-id", "tiny"]
    argv += ["--server-addr", f"127.0.0.1:{port}", "--logs", "console", "--device", "cpu"]
    argv += ["--bind-p2p-host", "127.0.0.1"]
    client = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert client.stdout is not None
    seen: list[str] = []
    for line in client.stdout:
        seen.append(line)
        if "joined run" in line:
            break
    deadline = time.monotonic() + 60
    while not (hosts := _children(client.pid)):
        assert time.monotonic() < deadline, "the client started no host process"
        time.sleep(0.2)
    for pid in hosts:
        os.kill(pid, signal.SIGKILL)
    try:
        out, _ = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    text = "".join(seen) + out
    assert client.returncode == 1, text
    errors = [ln.split("ERROR", 1)[1].strip() for ln in text.splitlines() if " ERROR " in ln]
    assert errors[0] == "the p2p host process exited unexpectedly", text
    last = errors[-1]
    assert last.startswith("the p2p host process exited") and last.endswith("; stopping"), text
    assert "Traceback" not in text and "never retrieved" not in text, text
