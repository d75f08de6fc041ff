"""Drive ``node_runner.py`` processes from a test: start several, send commands, await events.

Each :class:`NodeProc` owns one runner process (registered with the ``reap_children`` fixture,
so it dies with the test) whose own libp2p host child exits with it. A reader thread splits the
runner's stdout into command replies and events.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psyche.protocol.identity import SecretKey

RUNNER = Path(__file__).with_name("node_runner.py")
STARTUP_TIMEOUT = 90.0  # importing py-libp2p alone takes seconds on a loaded 2-core machine


class JsonLinesNode:
    """A node runner process (``node_runner.py`` or a script built on it) driven over JSON
    lines on its stdin/stdout: requests with an id get replies, the rest are events."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.proc = proc
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.peer_id = ""
        self.addrs: list[str] = []
        self.host_pid = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            msg = json.loads(raw)
            with self._cond:
                if "id" in msg:
                    self._replies[msg["id"]] = msg
                else:
                    self.events.append(msg)
                self._cond.notify_all()

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        ready = self.wait_event(lambda e: e.get("event") == "ready", timeout)
        self.peer_id, self.addrs, self.host_pid = ready["peer_id"], ready["addrs"], ready["pid"]

    def wait_event(self, pred: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events:
                    if pred(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"{self.name}: no matching event; got {self.events[-5:]}")
                self._cond.wait(min(left, 0.5))

    def send(self, op: str, **args: Any) -> int:
        req_id = next(self._ids)
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"id": req_id, "op": op, **args}) + "\n").encode())
        self.proc.stdin.flush()
        return req_id

    def reply(self, req_id: int, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while req_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"{self.name}: no reply to request {req_id}")
                self._cond.wait(min(left, 0.5))
            msg = self._replies.pop(req_id)
        if "error" in msg:
            raise RuntimeError(f"{self.name}: {msg['error']}")
        return msg

    def call(self, op: str, *, wait: float = 30.0, **args: Any) -> dict[str, Any]:
        """Send ``op`` and block for its reply (``wait`` seconds at most)."""
        return self.reply(self.send(op, **args), wait)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b'{"op": "stop"}\n')
            self.proc.stdin.flush()
            self.proc.wait(timeout=15)


class NodeProc(JsonLinesNode):
    def __init__(self, name: str, run_id: str, reap: list[subprocess.Popen[bytes]]) -> None:
        self.secret = SecretKey.generate()
        proc = subprocess.Popen(
            [
                sys.executable,
                str(RUNNER),
                "--run-id",
                run_id,
                "--key-hex",
                self.secret.to_bytes().hex(),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        reap.append(proc)
        super().__init__(name, proc)

    def announcements(self) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("event") == "announcement"]

    def kill_host(self) -> None:
        """SIGKILL the libp2p host child: to its peers this node crashed mid-whatever."""
        os.kill(self.host_pid, signal.SIGKILL)


def start_nodes(
    names: str, run_id: str, reap: list[subprocess.Popen[bytes]]
) -> dict[str, NodeProc]:
    """Start one node per letter of ``names`` in parallel and wait until all listen."""
    nodes = {n: NodeProc(n, run_id, reap) for n in names}
    for node in nodes.values():
        node.wait_ready()
    return nodes


def mesh(nodes: list[NodeProc], allowed: list[NodeProc] | None = None) -> None:
    """Connect every node to every other and allow ``allowed`` (default: all of ``nodes``)."""
    allowed = nodes if allowed is None else allowed
    for node in nodes:
        node.call("allow", peers=[n.peer_id for n in allowed if n is not node])
    for i, node in enumerate(nodes):
        for other in nodes[i + 1 :]:
            node.call("connect", addrs=other.addrs)
