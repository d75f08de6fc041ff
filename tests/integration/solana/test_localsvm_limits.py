"""The local SVM's fronts under hostile clients, against a real server process (no programs
needed): malformed bodies get JSON-RPC errors and leave no traceback in the server's log, and a
websocket client that subscribes many times to a large account and never reads cannot grow the
server past the stated bound (docs/localsvm.md, "Limits")."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import Message
from solders.system_program import CreateAccountParams, create_account
from solders.transaction import Transaction
from websockets.sync.client import connect

from psyche.localsvm.http_server import HttpServer
from psyche.localsvm.pubsub import MAX_QUEUED_BYTES, MAX_SUBSCRIPTIONS

SOL = 10**9
BIG = 1 << 20  # data bytes of the account the subscribers follow (1.4 MB as base64)
SUBSCRIPTIONS = 64  # well under MAX_SUBSCRIPTIONS: the queue bound is what must hold
MIB = 1 << 20
GROWTH_BOUND = MAX_QUEUED_BYTES + 24 * MIB
"""What one connection may make the server grow by: its queue bound, plus a few notifications
of 1.4 MB in flight (the writer's, the socket's buffer) and the allocator's slack."""

SERVER = """
import asyncio, json, logging, os, sys
from psyche.localsvm import LocalSvm

async def main(ready):
    async with LocalSvm({}) as node:
        with open(ready + ".tmp", "w") as f:
            json.dump({"rpc": node.url, "ws": node.ws_url}, f)
        os.replace(ready + ".tmp", ready)
        await asyncio.Event().wait()

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
asyncio.run(main(sys.argv[1]))
"""


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    ws_url: str
    log: Path

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def call(self, method: str, params: list[Any] | None = None) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
        reply = httpx.post(self.url, json=body, timeout=10).json()
        assert "result" in reply, reply
        return reply["result"]

    def post(self, content: bytes) -> httpx.Response:
        headers = {"content-type": "application/json"}
        return httpx.post(self.url, content=content, headers=headers, timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("svm")
    ready, log = tmp / "ready.json", tmp / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(ready)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the local SVM did not start"
            time.sleep(0.1)
        urls = json.loads(ready.read_text())
        yield Server(proc, urls["rpc"], urls["ws"], log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _deep(depth: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":1,"method":"getSlot","params":' + b"[" * depth + b"]" * depth


def test_malformed_bodies_get_json_rpc_errors_and_no_traceback(server: Server) -> None:
    bodies = [
        b'{"jsonrpc":"2.0","id":1,"method":"getBalance","params":["\xff\xfe"]}',  # not UTF-8
        b"[" * 1000 + b"]" * 1000,
        b'{"a":' * 1000 + b"1" + b"}" * 1000,
        _deep(1000) + b"}",
        b"[" * (50 * 1024),  # as deep as the body limit allows
    ]
    for body in bodies:
        reply = server.post(body)
        assert reply.status_code == 200, (body[:40], reply.status_code)
        assert reply.json() == {
            "jsonrpc": "2.0",
            "error": {"code": -32700, "message": "Parse error"},
            "id": None,
        }
    # Deep but decodable: an ordinary invalid-params error.
    assert server.post(_deep(200) + b"}").json()["error"]["code"] == -32602
    # The websocket front: a binary frame that is not UTF-8, and deep nesting.
    with connect(server.ws_url) as ws:
        for frame in (bodies[0], bodies[1].decode()):
            ws.send(frame)
            assert json.loads(ws.recv(timeout=10))["error"]["code"] == -32700
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "slotSubscribe"}))
        assert isinstance(json.loads(ws.recv(timeout=10))["result"], int)
    assert server.call("getHealth") == "ok"
    log = server.log.read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_subscriptions_per_connection_are_bounded(server: Server) -> None:
    quiet = str(Keypair().pubkey())  # an account nobody changes: no notifications interleave
    with connect(server.ws_url) as ws:
        for i in range(MAX_SUBSCRIPTIONS + 1):
            request = {"jsonrpc": "2.0", "id": i, "method": "accountSubscribe", "params": [quiet]}
            ws.send(json.dumps(request))
        replies = [json.loads(ws.recv(timeout=10)) for _ in range(MAX_SUBSCRIPTIONS + 1)]
    assert all("result" in r for r in replies[:MAX_SUBSCRIPTIONS])
    assert replies[MAX_SUBSCRIPTIONS]["error"]["code"] == -32603
    assert "at most" in replies[MAX_SUBSCRIPTIONS]["error"]["message"]


def _ws_frame(text: str) -> bytes:
    """A masked client text frame (RFC 6455)."""
    payload = text.encode()
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x81]) + (
        bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
    )
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _never_reading_client(ws_url: str) -> socket.socket:
    """A websocket client with a tiny receive buffer that, after the handshake, only writes."""
    host, port = ws_url.removeprefix("ws://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)  # byte by byte: read nothing past the handshake
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _big_account(server: Server) -> Keypair:
    payer, account = Keypair(), Keypair()
    rent = server.call("getMinimumBalanceForRentExemption", [BIG])
    server.call("requestAirdrop", [str(payer.pubkey()), rent + SOL])
    blockhash = Hash.from_string(server.call("getLatestBlockhash")["value"]["blockhash"])
    ix = create_account(
        CreateAccountParams(
            from_pubkey=payer.pubkey(),
            to_pubkey=account.pubkey(),
            lamports=rent,
            space=BIG,
            owner=payer.pubkey(),
        )
    )
    msg = Message.new_with_blockhash([ix], payer.pubkey(), blockhash)
    tx = Transaction([payer, account], msg, blockhash)
    server.call("sendTransaction", [base64.b64encode(bytes(tx)).decode(), {"encoding": "base64"}])
    assert server.call("getAccountInfo", [str(account.pubkey()), {"encoding": "base64"}])["value"]
    return account


def test_a_subscriber_that_never_reads_cannot_grow_the_server(server: Server) -> None:
    account = str(_big_account(server).pubkey())
    subscribe = {"jsonrpc": "2.0", "method": "accountSubscribe"}
    params = [account, {"encoding": "base64"}]
    slow = _never_reading_client(server.ws_url)
    with connect(server.ws_url, max_size=None) as honest:
        for i in range(SUBSCRIPTIONS):
            slow.sendall(_ws_frame(json.dumps({**subscribe, "id": i, "params": params})))
        honest.send(json.dumps({**subscribe, "id": 0, "params": params}))
        assert "result" in json.loads(honest.recv(timeout=10))
        time.sleep(1.0)  # the slow client's subscriptions are in
        before = server.rss()
        lamports = server.call("getBalance", [account])["value"]
        for change in (1, 2):
            server.call("requestAirdrop", [account, change])
            note = json.loads(honest.recv(timeout=30))
            assert note["method"] == "accountNotification"
            value = note["params"]["result"]["value"]
            assert value["lamports"] == lamports + change * (change + 1) // 2
            assert len(base64.b64decode(value["data"][0])) == BIG
        time.sleep(1.0)
        growth = server.rss() - before
    slow.close()
    print(
        f"\nserver RSS growth after 2 changes of a {BIG // MIB} MiB account with "
        f"{SUBSCRIPTIONS} subscriptions on a connection that never reads: {growth / MIB:.1f} MiB "
        f"(bound {GROWTH_BOUND / MIB:.0f} MiB)"
    )
    assert growth < GROWTH_BOUND
    assert "websocket subscriber too slow" in server.log.read_text()
    assert server.call("getHealth") == "ok"


def test_a_handler_failure_is_still_answered_with_a_json_rpc_error() -> None:
    """A bug of ours (the handler raising) gets HTTP 500 with a -32603 error object."""

    def broken(body: bytes) -> bytes:
        raise RuntimeError("a bug")

    async def scenario() -> httpx.Response:
        server = HttpServer(broken)
        port = await server.start("127.0.0.1", 0)
        try:
            async with httpx.AsyncClient() as client:
                return await client.post(f"http://127.0.0.1:{port}", json={}, timeout=10)
        finally:
            await server.close()

    reply = asyncio.run(scenario())
    assert reply.status_code == 500
    assert reply.json()["error"] == {"code": -32603, "message": "Internal error"}
