"""A centralized client stopped with SIGTERM (``docker stop``, a supervisor, Ctrl-C's group
signal) logs that it shut down cleanly, exits 143, and logs no error (issue 28, item 1: it used to
add ``ERROR Future exception was never retrieved … NodeStopped('the p2p host process exited')``).

The signal goes to the whole process group, the client and its libp2p host child at once, right
after the client has joined, while its P2P node is starting: the host's end and the client's
cancellation race there.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from .helpers import start_joined_client

pytestmark = pytest.mark.slow


def test_sigterm_is_a_clean_stop_without_errors(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    client, seen = start_joined_client(tmp_path, reap_children)
    os.killpg(client.pid, signal.SIGTERM)
    try:
        out, _ = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    text = "".join(seen) + out
    assert client.returncode == 143, text
    assert "terminated (SIGTERM); shut down cleanly" in text
    assert " ERROR " not in text and "never retrieved" not in text, text
    assert "Traceback" not in text, text
