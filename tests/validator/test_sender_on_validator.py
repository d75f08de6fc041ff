"""The transaction sender against a real validator: a priority fee (``--compute-unit-price``)
is charged by the validator at price × compute-unit limit / 10⁶ on top of the signature fee;
and what a local SVM hides: a sent transaction is in flight for a while before any status is
seen, so a sender that re-signed at once after a missed confirmation sent it twice (2 sends in 2 of
2 runs before the fix; the validator ran it once only because the copy carried the same
blockhash). The sender now waits for the signature to land or expire first."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer

from integration.solana.test_tx_sender import FlakyConfirm
from psyche.solana.budget import OTHER_INSTRUCTION_UNITS, ComputeBudget
from psyche.solana.rpc import SolanaRpc, TxSender
from psyche.testnet.solana_chain import request_airdrop

from .test_rpc_differential import SOL

pytestmark = pytest.mark.slow
PRICE = 250_000
"""Micro-lamports per compute unit."""


def _transfer(url: str, rpc: SolanaRpc, sender: TxSender, to: Keypair) -> tuple[int, Any]:
    async def go() -> tuple[int, Any]:
        ix = transfer(
            TransferParams(from_pubkey=sender.payer.pubkey(), to_pubkey=to.pubkey(), lamports=SOL)
        )
        sig = await sender.send([ix], label="transfer")
        await asyncio.sleep(2)  # a second transaction, if any, lands meanwhile
        balance = await rpc.call("getBalance", [str(to.pubkey()), {"commitment": "confirmed"}])
        tx = await rpc.call(
            "getTransaction", [sig, {"encoding": "json", "commitment": "confirmed"}]
        )
        await rpc.close()
        return int(balance["value"]), tx

    return asyncio.run(go())


def test_a_priority_fee_is_charged_by_the_validator(validator: Any) -> None:
    payer, to = Keypair(), Keypair()
    request_airdrop(validator.url, str(payer.pubkey()), 10 * SOL)
    rpc = SolanaRpc(validator.url)
    sender = TxSender([rpc], payer, prepare=ComputeBudget([], price=PRICE))
    balance, tx = _transfer(validator.url, rpc, sender, to)
    assert balance == SOL
    limit = OTHER_INSTRUCTION_UNITS  # a system transfer's budget (budget.py)
    assert tx["meta"]["fee"] == 5000 + -(-PRICE * limit // 10**6), tx["meta"]


def test_a_transaction_whose_confirmation_was_missed_runs_once(validator: Any) -> None:
    payer, to = Keypair(), Keypair()
    request_airdrop(validator.url, str(payer.pubkey()), 10 * SOL)
    rpc = FlakyConfirm(validator.url)  # the first confirmation fails on our side, at once
    sender = TxSender([rpc], payer, backoff=0.01)
    balance, _ = _transfer(validator.url, rpc, sender, to)
    print(f"sends {rpc.sends}, received {balance / SOL} SOL")
    assert rpc.sends == 1 and balance == SOL, (rpc.sends, balance)
