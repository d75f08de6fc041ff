"""A public RPC's rate limit in front of the real validator: a loopback proxy answers every
third call HTTP 429 (``Retry-After: 0.2``), as a public endpoint does under load, and forwards the
rest to ``solana-test-validator``. A transfer sent through it by ``TxSender`` (blockhash, send,
status polls) lands once, with the refusals waited out. The validator has no rate limit of its
own, so the proxy stands in for the internet's endpoint; what is tested is the client's
conversation with a real cluster through it."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from solders.keypair import Keypair

from integration.solana.limiting_http import LimitingServer, serving
from integration.solana.test_tx_sender import received, send_transfer
from psyche.solana.rpc import SolanaRpc
from psyche.testnet.solana_chain import request_airdrop

from .test_rpc_differential import SOL

pytestmark = pytest.mark.slow


def _forward_to(upstream: str) -> Callable[[bytes], bytes]:
    def forward(body: bytes) -> bytes:
        req = urllib.request.Request(upstream, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return bytes(resp.read())

    return forward


@pytest.fixture
def limiting(validator: Any) -> Iterator[LimitingServer]:
    """Every third call refused, the rest forwarded to the validator."""
    with serving(LimitingServer(lambda n: n % 3 == 0, _forward_to(validator.url))) as srv:
        yield srv


def test_a_transfer_through_a_rate_limited_endpoint_lands_once(
    validator: Any, limiting: LimitingServer
) -> None:
    payer, to = Keypair(), Keypair().pubkey()
    request_airdrop(validator.url, str(payer.pubkey()), 10 * SOL)
    rpc = SolanaRpc(limiting.url)
    asyncio.run(send_transfer(rpc, payer, to))
    assert asyncio.run(received(rpc, to)) == SOL
    assert limiting.limited >= 1, limiting.calls
    print(f"{limiting.calls} calls, {limiting.limited} answered 429")
