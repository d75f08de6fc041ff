"""``TxSender`` against the local SVM: a transaction that landed is never sent again, and a
failure that would recur (an instruction error, rent) is not retried."""

from __future__ import annotations

import asyncio

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import Transaction

from psyche.localsvm import LocalSvmThread
from psyche.solana.rpc import ProgramRejectedError, RpcError, SolanaRpc, TxSender

SOL = 1_000_000_000


class FlakyConfirm(SolanaRpc):
    """An endpoint whose first confirmation fails on our side after the transaction landed
    (a timeout, a dropped connection), and which counts what it is asked to send."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.sends = 0
        self.confirm_failures = 1

    async def send_transaction(self, tx: Transaction) -> str:
        self.sends += 1
        return await super().send_transaction(tx)

    async def confirm(self, signature: str, timeout: float) -> None:
        if self.confirm_failures:
            self.confirm_failures -= 1
            raise RpcError("confirmation timed out (injected)")
        await super().confirm(signature, timeout)


def _balance(node: LocalSvmThread, key: Pubkey) -> int:
    account = node.get_account(key)
    return 0 if account is None else int(account.lamports)


def test_a_landed_transaction_whose_confirmation_failed_is_not_sent_again(
    local_svm: LocalSvmThread,
) -> None:
    payer, to = Keypair(), Keypair()
    local_svm.airdrop(payer.pubkey(), 10 * SOL)

    async def go() -> None:
        rpc = FlakyConfirm(local_svm.url)
        sender = TxSender([rpc], payer, backoff=0.01)
        ix = transfer(
            TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to.pubkey(), lamports=SOL)
        )
        await sender.send([ix], label="transfer")
        await rpc.close()
        assert rpc.sends == 1

    asyncio.run(go())
    assert _balance(local_svm, to.pubkey()) == SOL


def test_a_rent_failure_is_not_retried(local_svm: LocalSvmThread) -> None:
    payer, to = Keypair(), Keypair()
    local_svm.airdrop(payer.pubkey(), 10 * SOL)

    async def go() -> None:
        rpc = FlakyConfirm(local_svm.url)
        rpc.confirm_failures = 0
        sender = TxSender([rpc], payer, backoff=0.01)
        # 100 lamports would leave a new account below rent exemption: fails the same every time.
        ix = transfer(
            TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to.pubkey(), lamports=100)
        )
        with pytest.raises(ProgramRejectedError):
            await sender.send([ix], label="transfer")
        await rpc.close()
        assert rpc.sends == 1

    asyncio.run(go())
    assert _balance(local_svm, to.pubkey()) == 0
