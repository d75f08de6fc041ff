"""Blockhash expiry on a real validator: a transaction lost on its way (the first send is not
passed on, as a dropped packet) can never land once the block height passes its blockhash's
``lastValidBlockHeight`` (about 150 blocks, a minute). The sender notices that from the
validator's own ``getBlockHeight`` and signs anew, long before its confirmation timeout, and the
transfer lands exactly once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from solders.keypair import Keypair

from integration.solana.test_tx_sender import LostSend, received, send_transfer
from psyche.testnet.solana_chain import request_airdrop

from .test_rpc_differential import SOL

pytestmark = pytest.mark.slow


def test_a_lost_transaction_is_signed_anew_when_its_blockhash_expires(validator: Any) -> None:
    payer, to = Keypair(), Keypair().pubkey()
    request_airdrop(validator.url, str(payer.pubkey()), 10 * SOL)
    rpc = LostSend(validator.url)
    took = asyncio.run(send_transfer(rpc, payer, to, confirm_timeout=600))
    sends, balance = rpc.sends, asyncio.run(received(rpc, to))
    print(f"signed anew after {took:.0f} s")
    assert sends == 2 and balance == SOL
    # Expiry (≈150 blocks: 60 s idle, 210 s measured beside a CI run), not the 600 s timeout.
    assert 30 < took < 500, took
