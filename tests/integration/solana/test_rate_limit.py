"""A public RPC's rate limit (HTTP 429): ``SolanaRpc`` repeats the call after ``Retry-After``
(or an exponential wait, capped), and after too many refusals fails with one clear line naming
the fallback endpoints. Against a real HTTP server on loopback that refuses the first calls (the
limiting endpoint is the internet's; what it answers is what a public RPC answers)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from psyche.solana.rpc import RATE_LIMIT_RETRIES, RpcError, SolanaRpc, retry_after

from .limiting_http import LimitingServer, serving


def _answer(body: bytes) -> bytes:
    call_id = json.loads(body)["id"]
    return json.dumps({"jsonrpc": "2.0", "id": call_id, "result": 42}).encode()


@pytest.fixture
def server() -> Iterator[LimitingServer]:
    with serving(LimitingServer(lambda n: False, _answer)) as srv:
        yield srv


def call(srv: LimitingServer) -> object:
    async def go() -> object:
        rpc = SolanaRpc(srv.url)
        try:
            return await rpc.call("getSlot", [])
        finally:
            await rpc.close()

    return asyncio.run(go())


def test_a_rate_limited_call_is_repeated_after_retry_after(server: LimitingServer) -> None:
    server.refuses = lambda n: n <= 2
    t0 = time.monotonic()
    assert call(server) == 42
    assert server.calls == 3
    assert time.monotonic() - t0 >= 0.4  # two waits of Retry-After: 0.2


def test_endless_rate_limiting_is_one_clear_error(server: LimitingServer) -> None:
    server.refuses = lambda n: True
    server.retry_after = "0"
    with pytest.raises(RpcError, match=r"rate-limited \(HTTP 429\) 5 times: use a less busy"):
        call(server)
    assert server.calls == RATE_LIMIT_RETRIES + 1


def test_the_wait_follows_retry_after_and_is_capped() -> None:
    assert retry_after("3", 0) == 3.0
    assert retry_after(None, 0) == 1.0 and retry_after(None, 3) == 8.0
    assert retry_after("3600", 0) == 10.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1) == 2.0
