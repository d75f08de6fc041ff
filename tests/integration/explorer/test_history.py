"""``psyche explorer serve --database DB`` with no source (issue 42 item 2): the stored runs served
read-only, as a process and in-process: the database is left byte-identical and nothing is
created beside it, the API says the explorer is not live, a database another explorer is still
writing (its last transactions only in the WAL) is read whole, and what cannot be served (no such
file, not an explorer database, another schema version) is one ``error:`` line and exit 2,
creating nothing."""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient

from psyche.explorer.observe import MetricObs, observe
from psyche.explorer.readonly import NotServable, open_read_only
from psyche.explorer.schema import SCHEMA_VERSION, migrate, open_engine
from psyche.explorer.store import Store
from psyche.explorer.web import make_app

from ..support_explorer import make_coordinator

CMD = [sys.executable, "-m", "psyche.cli.main", "explorer", "serve"]


def _stored_run(db: Path, steps: int = 3) -> Store:
    """A database as a following explorer leaves it: one run, a state, ``steps`` witness
    reports."""
    store = Store(open_engine(str(db)))
    run = store.run("centralized:test:tiny", "centralized", "test", "tiny")
    store.record_state(run, observe(make_coordinator(), 1))
    reports = [MetricObs(f"r{i}", 0.0, "ab", i, 3.0 - i / 10, 50.0, 0.0, 0.0) for i in range(steps)]
    store.record_metrics(run, reports)
    return store


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _serve_history(db: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = tmp_path / "url.txt"
    args = ["--database", str(db), "--port", "0", "--ready-file", str(ready)]
    proc = subprocess.Popen([*CMD, *args], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[1].decode()[-2000:])
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return proc, ready.read_text().strip()


def _stop(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert "Traceback" not in err.decode()
    return err.decode()


def test_serving_a_database_alone_leaves_it_byte_identical(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = data / "explorer.sqlite"
    _stored_run(db).engine.dispose()
    before, files = _digest(db), sorted(p.name for p in data.iterdir())
    assert files == ["explorer.sqlite"]  # the writer closed: its WAL is in the file
    proc, url = _serve_history(db, tmp_path)
    try:
        assert _get(url + "api/explorer") == {"live": False, "read_only": True}
        (run,) = _get(url + "api/runs")
        assert (run["run_id"], run["phase"]) == ("tiny", "WaitingForMembers")
        assert [s["step"] for s in _get(url + f"api/runs/{run['id']}/steps")] == [0, 1, 2]
        # Every method but GET is refused, as on a live explorer.
        req = urllib.request.Request(url + "api/runs", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 405
    finally:
        err = _stop(proc)
    assert "read-only (not followed live)" in err, err
    assert _digest(db) == before
    assert sorted(p.name for p in data.iterdir()) == files  # no -wal, no -shm


def test_a_database_still_being_written_is_read_whole_and_not_written(tmp_path: Path) -> None:
    """A writer that holds the database open keeps its last transactions in the WAL: the
    history read sees them (``mode=ro``), and the main file is not written."""
    db = tmp_path / "explorer.sqlite"
    store = _stored_run(db)
    # Another connection held open: the last one to close would checkpoint the WAL into the file.
    writer = sqlite3.connect(db)
    writer.execute("SELECT count(*) FROM runs").fetchall()
    store.engine.dispose()
    late = Store(open_engine(str(db)))
    late.record_metrics(1, [MetricObs("late", 0.0, "ab", 9, 1.0, 50.0, 0.0, 0.0)])
    late.engine.dispose()
    try:
        assert (tmp_path / "explorer.sqlite-wal").stat().st_size > 0
        before = _digest(db)
        proc, url = _serve_history(db, tmp_path)
        try:
            assert [s["step"] for s in _get(url + "api/runs/1/steps")] == [0, 1, 2, 9]
        finally:
            _stop(proc)
        assert _digest(db) == before
    finally:
        writer.close()


def test_the_read_only_engine_cannot_write(tmp_path: Path) -> None:
    db = tmp_path / "explorer.sqlite"
    _stored_run(db).engine.dispose()
    engine = open_read_only(str(db))
    with pytest.raises(OperationalError, match="readonly"), engine.begin() as conn:
        conn.execute(text("DELETE FROM metrics"))
    client = TestClient(make_app(Store(engine), live=False))
    assert client.get("/api/explorer").json() == {"live": False, "read_only": True}
    assert len(client.get("/api/runs/1/steps").json()) == 3
    engine.dispose()
    live = TestClient(make_app(Store(open_engine(str(db)))))
    assert live.get("/api/explorer").json() == {"live": True, "read_only": False}


def _one_error_line(code: int, err: str, *want: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --database "), err
    assert all(w in lines[0] for w in want), (lines[0], want)
    return lines[0]


def test_what_cannot_be_served_is_one_line_and_exit_2_creating_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real process once; the other cases in this process (the same command, through click).
    res = subprocess.run([*CMD, "--database", "runs/gone.sqlite"], capture_output=True,
                         timeout=60, cwd=tmp_path)  # fmt: skip
    line = _one_error_line(res.returncode, res.stderr.decode(), "runs/gone.sqlite: no such file")
    assert "--centralized" in line  # how to follow a run instead
    assert list(tmp_path.iterdir()) == []
    monkeypatch.chdir(tmp_path)

    def serve(database: str, *want: str) -> None:
        from psyche.cli.explorer import explorer

        got = CliRunner().invoke(explorer, ["serve", "--database", database, "--port", "0"])
        assert got.exception is None or isinstance(got.exception, SystemExit), got.exception
        _one_error_line(got.exit_code, got.stderr, *want)

    serve(f"sqlite:///{tmp_path}/gone.sqlite", "no such file")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    serve("notes.txt", "cannot read it as an explorer database", "not a database")
    sqlite3.connect(tmp_path / "other.sqlite").execute("CREATE TABLE t (x)").connection.close()
    serve("other.sqlite", "not an explorer database", "schema_version")
    (tmp_path / "folder").mkdir()
    serve("folder", "not a file")
    old = tmp_path / "old.sqlite"
    engine = create_engine(f"sqlite:///{old}")
    migrate(engine, upto=SCHEMA_VERSION - 1)
    engine.dispose()
    before = _digest(old)
    serve("old.sqlite", f"schema version {SCHEMA_VERSION - 1}", "older")
    assert _digest(old) == before  # not migrated
    future = tmp_path / "future.sqlite"
    open_engine(str(future)).dispose()
    conn = sqlite3.connect(future)
    conn.execute("UPDATE schema_version SET version = 999")
    conn.commit()
    conn.close()
    serve("future.sqlite", "schema version 999", "newer")
    names = ["folder", "future.sqlite", "notes.txt", "old.sqlite", "other.sqlite"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_solana_flags_without_a_run_are_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "explorer.sqlite"
    _stored_run(db).engine.dispose()
    for flags in (["--rpc", "http://127.0.0.1:9"], ["--pool", "7"]):
        res = subprocess.run([*CMD, "--database", str(db), *flags], capture_output=True)
        assert res.returncode == 2 and b"give --run-id too" in res.stderr, res.stderr


def test_not_servable_names_no_password() -> None:
    from psyche.explorer.readonly import shown_url

    assert "secret" not in shown_url("postgresql://explorer:secret@db-host/explorer")
    with pytest.raises(NotServable, match="no database file"):
        open_read_only("sqlite://")


READERS = """
import sys, threading
from sqlalchemy import text
from psyche.explorer.readonly import open_read_only
engine = open_read_only(sys.argv[1])
barrier, errors = threading.Barrier(16), []
def read():
    try:
        barrier.wait()
        for _ in range(30):
            with engine.connect() as conn:
                conn.execute(text("select count(*) from schema_version")).scalar()
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=read) for _ in range(16)]
[t.start() for t in threads]
[t.join() for t in threads]
print(type(engine.pool).__name__, len(errors), errors[:1])
"""


def test_the_read_only_engine_serves_many_threads_at_once(tmp_path: Path) -> None:
    """The page's reads run in Starlette's thread pool, five at once per run page. The read-only
    SQLite engine once used the in-memory database's SingletonThreadPool (its URL is
    ``sqlite://`` with a creator), which closes other threads' connections mid-query once more
    threads than its size have read: HTTP 500s, and with 16 threads a segfault (so the readers
    run in a child process). CI once waited 30 s for a run page that never came."""
    db = tmp_path / "explorer.sqlite"
    open_engine(f"sqlite:///{db}").dispose()  # an empty explorer database at this schema
    out = subprocess.run(
        [sys.executable, "-c", READERS, str(db)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split()[:2] == ["QueuePool", "0"], out.stdout
