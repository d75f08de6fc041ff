"""Blockhash expiry on a real validator: a transaction lost on its way (the first send is not
passed on, as a dropped packet) can never land once the block height passes its blockhash's
``lastValidBlockHeight`` (about 150 blocks, a minute). The sender notices that from the
validator's own ``getBlockHeight`` and signs anew, long before its confirmation timeout, and the
transfer lands exactly once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer

from integration.solana.test_tx_sender import LostSend
from psyche.solana.rpc import TxSender
from psyche.testnet.solana_chain import request_airdrop

from .test_rpc_differential import SOL

pytestmark = pytest.mark.slow


def test_a_lost_transaction_is_signed_anew_when_its_blockhash_expires(validator: Any) -> None:
    payer, to = Keypair(), Keypair()
    request_airdrop(validator.url, str(payer.pubkey()), 10 * SOL)

    async def go() -> tuple[float, int, int]:
        rpc = LostSend(validator.url)
        sender = TxSender([rpc], payer, backoff=0.01, confirm_timeout=600)
        ix = transfer(
            TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to.pubkey(), lamports=SOL)
        )
        t0 = time.monotonic()
        await sender.send([ix], label="transfer")
        took = time.monotonic() - t0
        balance = await rpc.call("getBalance", [str(to.pubkey()), {"commitment": "confirmed"}])
        await rpc.close()
        return took, rpc.sends, int(balance["value"])

    took, sends, balance = asyncio.run(go())
    print(f"signed anew after {took:.0f} s")
    assert sends == 2 and balance == SOL
    # Expiry (≈150 blocks: 60 s idle, 210 s measured beside a CI run), not the 600 s timeout.
    assert 30 < took < 500, took
