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
import time
from pathlib import Path

import pytest

from .helpers import start_joined_client

pytestmark = pytest.mark.slow


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_client_whose_p2p_host_dies_stops_with_exit_code_1(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    client, seen = start_joined_client(tmp_path, reap_children)
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
