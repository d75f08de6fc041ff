"""``psyche explorer serve`` as a process: a free port, the ready file, an API answer, a clean
SIGTERM that logs what following cost and leaves no WAL beside the database; usage errors and a
database from the future exit 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from sqlalchemy import create_engine, text

from psyche.explorer.schema import open_engine

CMD = [sys.executable, "-m", "psyche.cli.main", "explorer", "serve"]


def test_serve_answers_and_stops_cleanly(tmp_path: Path) -> None:
    # Relative paths, against the folder it starts in (issue 37).
    ready = tmp_path / "url.txt"
    args = ["--database", "db.sqlite", "--port", "0", "--ready-file", "url.txt"]
    args += ["--centralized", "http://127.0.0.1:9", "--interval", "0.2"]
    proc = subprocess.Popen([*CMD, *args], stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        url = ready.read_text().strip()
        with urllib.request.urlopen(url + "api/runs", timeout=10) as resp:
            assert json.loads(resp.read()) == []
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    lines = err.decode().splitlines()
    assert sum("unavailable" in line for line in lines) == 1, lines
    assert any("calls in" in line and "per minute" in line for line in lines), lines
    assert "Traceback" not in err.decode()
    assert (tmp_path / "db.sqlite").is_file()
    # Stopped, it closed its connections: the WAL is checkpointed into one self-contained file.
    assert not (tmp_path / "db.sqlite-wal").exists()


def test_bad_invocations_exit_2_with_one_line(tmp_path: Path) -> None:
    # No source: the database's history, which must exist (tests/integration/explorer/
    # test_history.py has the rest).
    res = subprocess.run([*CMD, "--database", str(tmp_path / "a.sqlite")], capture_output=True)
    assert res.returncode == 2 and b"a.sqlite: no such file" in res.stderr
    assert not (tmp_path / "a.sqlite").exists()
    res = subprocess.run([*CMD, "--run-id", "x"], capture_output=True)
    assert res.returncode == 2 and b"--run-id needs --rpc" in res.stderr
    future = tmp_path / "future.sqlite"
    open_engine(str(future)).dispose()
    engine = create_engine(f"sqlite:///{future}")
    with engine.begin() as conn:
        conn.execute(text("UPDATE schema_version SET version = 999"))
    engine.dispose()
    res = subprocess.run(
        [*CMD, "--database", str(future), "--port", "0", "--centralized", "http://127.0.0.1:9"],
        capture_output=True,
        timeout=60,
    )
    assert res.returncode == 2, res.stderr.decode()[-2000:]
    assert b"schema version 999" in res.stderr and b"Traceback" not in res.stderr
