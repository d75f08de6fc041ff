"""``TxSender`` against the local SVM: a transaction that landed is never sent again, and a
failure that would recur (an instruction error, rent) is not retried."""

from __future__ import annotations

import asyncio
import time

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

    async def confirm(self, signature: str, timeout: float, last_valid: int | None = None) -> None:
        if self.confirm_failures:
            self.confirm_failures -= 1
            raise RpcError("confirmation timed out (injected)")
        await super().confirm(signature, timeout, last_valid)


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


class LostSend(SolanaRpc):
    """An endpoint that loses the first transaction it is given (a packet dropped on the way to
    the leader: the node answers with the signature but never sees it)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.sends = 0

    async def send_transaction(self, tx: Transaction) -> str:
        self.sends += 1
        if self.sends == 1:
            return str(tx.signatures[0])
        return await super().send_transaction(tx)


def test_a_lost_transaction_is_signed_anew_once_its_blockhash_expired(
    local_svm: LocalSvmThread,
) -> None:
    """The sender does not wait out its confirmation timeout (120 s here) for a transaction
    that can no longer land: once the block height passes its blockhash's last valid height
    (moved ahead here, as 60 s of a real cluster would), it signs anew, and it lands once."""
    payer, to = Keypair(), Keypair()
    local_svm.airdrop(payer.pubkey(), 10 * SOL)

    async def go() -> float:
        rpc = LostSend(local_svm.url)
        sender = TxSender([rpc], payer, backoff=0.01, confirm_timeout=120)
        ix = transfer(
            TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to.pubkey(), lamports=SOL)
        )
        t0 = time.monotonic()
        sending = asyncio.create_task(sender.send([ix], label="transfer"))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(local_svm.advance_slots, 200)
        await sending
        await rpc.close()
        assert rpc.sends == 2
        return time.monotonic() - t0

    took = asyncio.run(go())
    assert took < 30, took
    assert _balance(local_svm, to.pubkey()) == SOL
