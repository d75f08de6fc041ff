"""``psyche explorer serve`` SIGKILLed while it writes: the database is intact, what was stored
is still there, and the restarted explorer goes on from it without storing anything twice."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sqlalchemy import func, select

from psyche.coordinator.state_json import to_obj_state
from psyche.explorer.schema import integrity_ok, metrics, open_engine, states
from psyche.explorer.store import Store

from ..support_explorer import count, make_coordinator

CMD = [sys.executable, "-m", "psyche.cli.main", "explorer", "serve"]


class _Status(BaseHTTPRequestHandler):
    """A busy server: every answer is a new state and 300 new witness reports."""

    n = 0
    coordinator = json.dumps(to_obj_state(make_coordinator()))

    def do_GET(self) -> None:
        cls = type(self)
        cls.n += 1
        reports = [
            {"ref": f"{cls.n}:{i}", "at": 1.0, "client": "ab", "step": cls.n * 300 + i,
             "loss": 2.0, "tokens_per_sec": 1.0, "bandwidth_per_sec": 0.0, "efficiency": 0.0,
             "evals": []}
            for i in range(300)
        ]  # fmt: skip
        head = {"seq": cls.n, "first_seq": 0, "witnesses": reports}
        body = json.dumps(head)[:-1].encode() + b',"coordinator":' + cls.coordinator.encode() + b"}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _start(db: Path, port: int) -> subprocess.Popen[bytes]:
    args = ["--database", str(db), "--port", "0", "--interval", "0.1"]
    return subprocess.Popen([*CMD, *args, "--centralized", f"http://127.0.0.1:{port}"],
                            stderr=subprocess.DEVNULL)  # fmt: skip


def _wait_for(store: Store, table: object, above: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = count(store, table)
        if n > above:
            return n
        time.sleep(0.1)
    raise AssertionError(f"nothing stored above {above}")


def test_a_killed_explorer_loses_nothing_and_resumes(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    db = tmp_path / "db.sqlite"
    store = Store(open_engine(str(db)))
    try:
        proc = _start(db, server.server_port)
        try:
            _wait_for(store, metrics, 1500)
            time.sleep(0.37)  # somewhere in the middle of a poll's writes
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
        store.engine.dispose()
        assert integrity_ok(store.engine)
        before_states, before_metrics = count(store, states), count(store, metrics)
        assert before_metrics >= 1500 and before_states >= 5
        proc = _start(db, server.server_port)
        try:
            _wait_for(store, states, before_states + 3)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        server.shutdown()
    assert count(store, metrics) > before_metrics
    with store.engine.connect() as conn:
        refs = conn.execute(select(func.count(metrics.c.ref.distinct()))).scalar_one()
        seqs = conn.execute(select(func.count(states.c.seq.distinct()))).scalar_one()
    assert refs == count(store, metrics) and seqs == count(store, states)
    # Every poll's reports were stored whole or not at all: a multiple of 300 per state.
    assert count(store, metrics) == 300 * count(store, states)
