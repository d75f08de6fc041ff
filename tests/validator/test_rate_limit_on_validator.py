"""A public RPC's rate limit in front of the real validator: a loopback proxy answers every
third call HTTP 429 (``Retry-After: 0.2``), as a public endpoint does under load, and forwards the
rest to ``solana-test-validator``. A transfer sent through it by ``TxSender`` (blockhash, send,
status polls) lands once, with the refusals waited out. The validator has no rate limit of its
own, so the proxy stands in for the internet's endpoint; what is tested is the client's
conversation with a real cluster through it."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer

from psyche.solana.rpc import SolanaRpc, TxSender
from psyche.testnet.solana_chain import request_airdrop

from .test_rpc_differential import SOL

pytestmark = pytest.mark.slow


class Limiting(ThreadingHTTPServer):
    upstream = ""
    calls = 0
    limited = 0
    lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    server: Limiting

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.calls += 1
            refuse = self.server.calls % 3 == 0
            self.server.limited += refuse
        if refuse:
            self.send_response(429)
            self.send_header("Retry-After", "0.2")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        req = urllib.request.Request(
            self.server.upstream, body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            out = resp.read()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def limiting(validator: Any) -> Iterator[Limiting]:
    server = Limiting(("127.0.0.1", 0), Handler)
    server.upstream = validator.url
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_transfer_through_a_rate_limited_endpoint_lands_once(
    validator: Any, limiting: Limiting
) -> None:
    payer, to = Keypair(), Keypair()
    request_airdrop(validator.url, str(payer.pubkey()), 10 * SOL)
    url = f"http://127.0.0.1:{limiting.server_address[1]}"

    async def go() -> int:
        rpc = SolanaRpc(url)
        sender = TxSender([rpc], payer, backoff=0.01)
        ix = transfer(
            TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to.pubkey(), lamports=SOL)
        )
        await sender.send([ix], label="transfer")
        balance = await rpc.call("getBalance", [str(to.pubkey()), {"commitment": "confirmed"}])
        await rpc.close()
        return int(balance["value"])

    assert asyncio.run(go()) == SOL
    assert limiting.limited >= 1, limiting.calls
    print(f"{limiting.calls} calls, {limiting.limited} answered 429")
