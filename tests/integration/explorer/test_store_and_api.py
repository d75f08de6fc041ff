"""The explorer's database and API: migrations, idempotent writes, a writer killed mid-write,
and a hostile reader of /api/ (bounded queries, 4xx answers, read-only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.exc import DBAPIError
from starlette.testclient import TestClient

from psyche.explorer.observe import ClientRow, MetricObs, observe
from psyche.explorer.readonly import open_read_only
from psyche.explorer.schema import SCHEMA_VERSION, integrity_ok, migrate, open_engine, states
from psyche.explorer.store import Store
from psyche.explorer.web import make_app

from ..support_explorer import count, make_coordinator
from .pg_server import throwaway_postgres

WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [{tests!r}, {root!r}]
    from psyche.explorer.observe import observe
    from psyche.explorer.schema import open_engine
    from psyche.explorer.store import Store
    from support_explorer import make_coordinator
    store = Store(open_engine({db!r}))
    run = store.run("centralized:test:tiny", "centralized", "test", "tiny")
    c = make_coordinator()
    seq = 0
    while True:
        store.record_state(run, observe(c, seq))
        seq = (seq + 1) % 100_000
        if seq == 50:
            print("writing", flush=True)
    """
)


def test_a_writer_killed_mid_write_loses_nothing_stored(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    here = Path(__file__).resolve()
    code = WRITER.format(tests=str(here.parents[1]), root=str(here.parents[2]), db=str(db))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "client")}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"writing\n"
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    engine = open_engine(str(db))
    assert integrity_ok(engine)
    store = Store(engine)
    stored = count(store, states)
    assert stored >= 50
    # Restarting from the beginning re-sees every state: none is stored twice.
    run = store.run("centralized:test:tiny", "centralized", "test", "tiny")
    c = make_coordinator()
    assert not any(store.record_state(run, observe(c, seq)) for seq in range(stored))
    assert count(store, states) == stored


def test_migrations_run_in_order_from_an_older_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = create_engine(url)
    assert migrate(engine, upto=1) == 0
    assert "cursors" not in inspect(engine).get_table_names()
    engine.dispose()
    engine = open_engine(url)
    assert "cursors" in inspect(engine).get_table_names()
    assert migrate(engine) == SCHEMA_VERSION
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def _filled(tmp_path: Path) -> Store:
    store = Store(open_engine(str(tmp_path / "db.sqlite")))
    run = store.run("k", "centralized", "test", "tiny")
    c = make_coordinator()
    store.record_state(run, observe(c, 1, clients=[ClientRow("ab", "Healthy", True)]))
    store.record_metrics(
        run, [MetricObs(f"r{i}", 0.0, "ab", i, 3.0 - i / 10, 50.0, 0.0, 0.0) for i in range(1, 6)]
    )
    return store


def test_api_answers_and_refuses(tmp_path: Path) -> None:
    client = TestClient(make_app(_filled(tmp_path)))
    assert client.get("/api/").json()["endpoints"]
    runs = client.get("/api/runs").json()
    assert [r["run_id"] for r in runs] == ["tiny"]
    rid = runs[0]["id"]
    assert client.get(f"/api/runs/{rid}").json()["detail"]["clients"][0]["id"] == "ab"
    steps = client.get(f"/api/runs/{rid}/steps?after=2&limit=2").json()
    assert [s["step"] for s in steps] == [3, 4]
    for path in ("rounds", "states", "transactions", "checkpoints"):
        assert client.get(f"/api/runs/{rid}/{path}?limit=5").status_code == 200
    assert client.get("/").status_code == 200
    assert client.get("/static/uPlot.iife.min.js").status_code == 200
    bad = {
        "/api/runs?limit=0": 400,
        "/api/runs?limit=1001": 400,
        "/api/runs?limit=abc": 400,
        "/api/runs?limit=99999999999999999999999": 400,
        "/api/runs?offset=-1": 400,
        "/api/runs?drop=table": 400,
        "/api/runs?" + "x" * 5000: 414,
        "/api/runs/999": 404,
        "/api/runs/abc": 404,
        "/api/runs/999/steps": 404,
        f"/api/runs/{rid}/steps?after=x": 400,
        "/api/nothing": 404,
        "/static/../schema.py": 404,
    }
    for path, status in bad.items():
        got = client.get(path)
        assert got.status_code == status, (path, got.status_code, got.text[:200])
        assert len(got.content) < 2000
    for method in ("post", "put", "delete"):
        assert getattr(client, method)("/api/runs").status_code == 405
    assert len(client.get("/api/runs").json()) == 1  # nothing changed


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """``EXPLORER_POSTGRES_URL`` when given (a server of your own: its explorer tables are
    dropped), else a throwaway server this test starts and stops."""
    given = os.environ.get("EXPLORER_POSTGRES_URL")
    if given:
        yield given
        return
    with throwaway_postgres() as url:
        yield url


def test_the_same_code_on_postgresql(postgres_url: str) -> None:
    engine = open_engine(postgres_url)
    with engine.begin() as conn:
        for table in (
            "cursors",
            "accounts",
            "checkpoints",
            "transactions",
            "metrics",
            "rounds",
            "states",
            "runs",
            "schema_version",
        ):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table} CASCADE")
    engine = open_engine(postgres_url)
    store = Store(engine)
    run = store.run("k", "centralized", "test", "tiny")
    c = make_coordinator()
    assert store.record_state(run, observe(c, 1)) and not store.record_state(run, observe(c, 1))
    assert count(store, states) == 1
    store.set_account(run, "pool", "addr", {"cap": 1})
    store.record_transactions(run, [], [], ("pool:x:users", "a," * 1000))
    assert store.cursor(run, "pool:x:users") == "a," * 1000
    store.record_metrics(run, [MetricObs("r1", 0.0, "ab", 1, 2.0, 1.0, 0.0, 0.0, [[0, 0.5]])])
    assert [(x["step"], x["evals"]) for x in store.steps(run, 10)] == [(1, {"0": 0.5})]
    client = TestClient(make_app(store))
    assert client.get(f"/api/runs/{run}/rounds").status_code == 200
    # Its history served read-only (no source): read, never written.
    history = open_read_only(postgres_url)
    assert [r["run_id"] for r in Store(history).runs(10)] == ["tiny"]
    with pytest.raises(DBAPIError, match="read-only transaction"), history.begin() as conn:
        conn.exec_driver_sql("DELETE FROM metrics")
    history.dispose()


def test_the_cost_command_measures_database_growth() -> None:
    from psyche.explorer.cost import database_bytes

    solana = database_bytes(rounds=20, solana=True)
    centralized = database_bytes(rounds=20, solana=False)
    assert solana["bytes_per_1000_rounds"] > centralized["bytes_per_1000_rounds"] > 0


def test_drain_rounds_reports_are_not_loss_points(tmp_path: Path) -> None:
    """Witnesses of the epoch's last (drain) rounds report their last, stale loss: the loss
    chart keeps only steps whose round trained (the coordinator's round_trained rule)."""
    from dataclasses import replace

    store = Store(open_engine(str(tmp_path / "db.sqlite")))
    run = store.run("k", "centralized", "test", "tiny")
    base = observe(make_coordinator(), 0)
    for step in range(1, 7):
        last = 7 if step >= 4 else 0  # set during round 4: steps 5 and 6 drain
        obs = replace(
            base, seq=step, phase="RoundTrain", step=step, height=step - 1, last_step=last
        )
        store.record_state(run, obs)
    store.record_metrics(
        run, [MetricObs(f"r{s}", 0.0, "ab", s, 2.0, 1.0, 0.0, 0.0) for s in range(1, 7)]
    )
    assert [s["step"] for s in store.steps(run, 100)] == [1, 2, 3, 4]
    assert [r["trained"] for r in store.rounds(run, 100)] == [True] * 4 + [False] * 2


def test_missing_postgresql_skips_only_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from . import pg_server

    monkeypatch.setattr(pg_server, "postgres_bin", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="system-deps"), pg_server.throwaway_postgres():
        pass
    monkeypatch.setenv("CI", "true")
    with (
        pytest.raises(pytest.fail.Exception, match="CI must have them"),
        pg_server.throwaway_postgres(),
    ):
        pass
