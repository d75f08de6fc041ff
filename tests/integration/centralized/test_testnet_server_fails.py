"""The seeds' recipe with the shipped consilience config, as a user runs it (issue 42, item 4):
the config's data is served by the server and no data.toml comes with it, so the server stops at
start. The launcher says why in the server's own words and exits with the server's code, instead
of "testnet failed: the server exited" and exit 1 with the reason only in logs/server.log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
CONFIG = ROOT / "config" / "consilience-match-llama2-20m-fineweb-pretrain-dev"


def test_the_launcher_prints_the_servers_error_line_and_exits_with_its_code(
    tmp_path: Path,
) -> None:
    assert not (CONFIG / "data.toml").exists()
    # No COLUMNS: the server's console wraps at 80 columns in its log, as for a user.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "CONFIG_PATH")}
    argv = [str(BIN / "psyche-centralized-local-testnet"), "start", "--num-clients", "3"]
    argv += ["--config-path", str(CONFIG), "--tui", "false", "--out", str(tmp_path / "out")]
    launcher = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # The server alone, run as the launcher runs it: its own line and code to compare with.
    argv = [str(BIN / "psyche-centralized-server"), "run", "--state", str(CONFIG / "state.toml")]
    argv += ["--server-port", "1", "--host", "127.0.0.1", "--tui", "false"]
    server = subprocess.run(
        argv,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        out, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert server.returncode not in (0, None)
    own = " ".join(server.stderr.split("cannot start the server: ")[1].split())
    assert "pass --data-config data.toml to serve the data" in own
    lines = out.splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("testnet failed: "))
    assert lines[failed].startswith("testnet failed: the server exited (exit "), out
    assert str(tmp_path / "out" / "logs" / "server.log") in lines[failed]
    assert lines[failed + 1] == f"cannot start the server: {own}", out
    assert launcher.returncode == server.returncode, out
    assert "Traceback" not in out
