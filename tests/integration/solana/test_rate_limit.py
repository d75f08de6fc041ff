"""A public RPC's rate limit (HTTP 429): ``SolanaRpc`` repeats the call after ``Retry-After``
(or an exponential wait, capped), and after too many refusals fails with one clear line naming
the fallback endpoints. Against a real HTTP server on loopback that refuses the first calls (the
limiting endpoint is the internet's; what it answers is what a public RPC answers)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from psyche.solana.rpc import RATE_LIMIT_RETRIES, RpcError, SolanaRpc, retry_after


class Limited(ThreadingHTTPServer):
    refuse = 0
    retry_after: str | None = "0.2"
    seen = 0


class Handler(BaseHTTPRequestHandler):
    server: Limited

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen += 1
        if self.server.seen <= self.server.refuse:
            self.send_response(429)
            if self.server.retry_after is not None:
                self.send_header("Retry-After", self.server.retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        out = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": 42}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Limited]:
    srv = Limited(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def call(srv: Limited) -> object:
    async def go() -> object:
        rpc = SolanaRpc(f"http://127.0.0.1:{srv.server_address[1]}")
        try:
            return await rpc.call("getSlot", [])
        finally:
            await rpc.close()

    return asyncio.run(go())


def test_a_rate_limited_call_is_repeated_after_retry_after(server: Limited) -> None:
    server.refuse = 2
    t0 = time.monotonic()
    assert call(server) == 42
    assert server.seen == 3
    assert time.monotonic() - t0 >= 0.4  # two waits of Retry-After: 0.2


def test_endless_rate_limiting_is_one_clear_error(server: Limited) -> None:
    server.refuse = 100
    server.retry_after = "0"
    with pytest.raises(RpcError, match=r"rate-limited \(HTTP 429\) 5 times: use a less busy"):
        call(server)
    assert server.seen == RATE_LIMIT_RETRIES + 1


def test_the_wait_follows_retry_after_and_is_capped() -> None:
    assert retry_after("3", 0) == 3.0
    assert retry_after(None, 0) == 1.0 and retry_after(None, 3) == 8.0
    assert retry_after("3600", 0) == 10.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1) == 2.0
