"""``TxSender`` against the local SVM: a transaction that landed, or may still land, is never
sent again; one the node refused is; and a failure that would recur (an instruction error, rent)
is not retried."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import Transaction

from psyche.localsvm import LocalSvmThread
from psyche.solana.rpc import (
    ProgramRejectedError,
    RpcError,
    RpcRefusedError,
    SolanaRpc,
    TxSender,
)

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


def _funded(node: LocalSvmThread) -> tuple[Keypair, Pubkey]:
    """A payer holding 10 SOL, and a new account to pay."""
    payer = Keypair()
    node.airdrop(payer.pubkey(), 10 * SOL)
    return payer, Keypair().pubkey()


async def send_transfer(
    rpc: SolanaRpc,
    payer: Keypair,
    to: Pubkey,
    *,
    lamports: int = SOL,
    during: Callable[[], Awaitable[object]] | None = None,
    confirm_timeout: float | None = None,
) -> float:
    """Sends ``lamports`` from ``payer`` to ``to`` through a ``TxSender`` over ``rpc`` alone
    (its own confirmation timeout unless one is given), running ``during`` meanwhile, and closes
    ``rpc``; returns the seconds the send took."""
    options = {} if confirm_timeout is None else {"confirm_timeout": confirm_timeout}
    sender = TxSender([rpc], payer, backoff=0.01, **options)
    ix = transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=lamports))
    t0 = time.monotonic()
    try:
        sending = asyncio.create_task(sender.send([ix], label="transfer"))
        if during is not None:
            await during()
        await sending
        return time.monotonic() - t0
    finally:
        await rpc.close()


async def received(rpc: SolanaRpc, key: Pubkey) -> int:
    """``key``'s confirmed balance, asked of ``rpc`` (closed after)."""
    try:
        answer = await rpc.call("getBalance", [str(key), {"commitment": "confirmed"}])
        return int(answer["value"])
    finally:
        await rpc.close()


def test_a_landed_transaction_whose_confirmation_failed_is_not_sent_again(
    local_svm: LocalSvmThread,
) -> None:
    payer, to = _funded(local_svm)
    rpc = FlakyConfirm(local_svm.url)
    asyncio.run(send_transfer(rpc, payer, to))
    assert rpc.sends == 1
    assert _balance(local_svm, to) == SOL


def test_a_rent_failure_is_not_retried(local_svm: LocalSvmThread) -> None:
    payer, to = _funded(local_svm)
    rpc = FlakyConfirm(local_svm.url)
    rpc.confirm_failures = 0
    # 100 lamports would leave a new account below rent exemption: fails the same every time.
    with pytest.raises(ProgramRejectedError):
        asyncio.run(send_transfer(rpc, payer, to, lamports=100))
    assert rpc.sends == 1
    assert _balance(local_svm, to) == 0


class FirstSendFails(SolanaRpc):
    """An endpoint whose first send goes wrong as ``first_send`` says; it counts the sends."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.sends = 0

    async def first_send(self, tx: Transaction) -> str:
        raise NotImplementedError

    async def send_transaction(self, tx: Transaction) -> str:
        self.sends += 1
        if self.sends == 1:
            return await self.first_send(tx)
        return await super().send_transaction(tx)


class LostSend(FirstSendFails):
    """An endpoint that loses the first transaction it is given (a packet dropped on the way to
    the leader: the node answers with the signature but never sees it)."""

    async def first_send(self, tx: Transaction) -> str:
        return str(tx.signatures[0])


def test_a_lost_transaction_is_signed_anew_once_its_blockhash_expired(
    local_svm: LocalSvmThread,
) -> None:
    """The sender does not wait out its confirmation timeout (120 s here) for a transaction
    that can no longer land: once the block height passes its blockhash's last valid height
    (moved ahead here, as 60 s of a real cluster would), it signs anew, and it lands once."""
    payer, to = _funded(local_svm)

    async def moved_ahead() -> None:
        await asyncio.sleep(1.0)
        await asyncio.to_thread(local_svm.advance_slots, 200)

    rpc = LostSend(local_svm.url)
    took = asyncio.run(send_transfer(rpc, payer, to, during=moved_ahead, confirm_timeout=120))
    assert rpc.sends == 2
    assert took < 30, took
    assert _balance(local_svm, to) == SOL


class InFlight(SolanaRpc):
    """An endpoint on which a sent transaction is in flight for ``latency`` seconds before the
    node sees it (as on a real cluster, where it travels to the leader), and whose first
    confirmation fails on our side at once (a dropped connection)."""

    def __init__(self, url: str, node: LocalSvmThread, latency: float) -> None:
        super().__init__(url)
        self.node = node
        self.latency = latency
        self.sends = 0
        self.confirm_failures = 1
        self._deliveries: list[asyncio.Task[str]] = []

    async def send_transaction(self, tx: Transaction) -> str:
        self.sends += 1

        async def deliver() -> str:
            await asyncio.sleep(self.latency)
            return await SolanaRpc.send_transaction(self, tx)

        self._deliveries.append(asyncio.create_task(deliver()))
        # Meanwhile the cluster moves on: a transaction signed now gets a newer blockhash.
        await asyncio.to_thread(self.node.advance_slots, 2)
        return str(tx.signatures[0])

    async def confirm(self, signature: str, timeout: float, last_valid: int | None = None) -> None:
        if self.confirm_failures:
            self.confirm_failures -= 1
            raise RpcError("connection reset (injected)")
        await super().confirm(signature, timeout, last_valid)

    async def close(self) -> None:
        for task in self._deliveries:
            with contextlib.suppress(Exception):
                await task
        await super().close()


def test_a_transaction_still_in_flight_is_waited_for_not_signed_anew(
    local_svm: LocalSvmThread,
) -> None:
    """A confirmation missed while the transaction is still on its way: the sender waits for
    that signature to land or expire before it signs anew, so the transfer runs once (signing
    anew at once, with the newer blockhash, ran it twice)."""
    payer, to = _funded(local_svm)
    rpc = InFlight(local_svm.url, local_svm, latency=1.5)
    asyncio.run(send_transfer(rpc, payer, to))
    assert rpc.sends == 1
    assert _balance(local_svm, to) == SOL


class RefusingFirst(FirstSendFails):
    """An endpoint that refuses the first transaction with a JSON-RPC error (a node behind, an
    unhealthy node): it was not forwarded, so nothing is in flight."""

    async def first_send(self, tx: Transaction) -> str:
        raise RpcRefusedError("Node is unhealthy (injected)")


def test_a_refused_send_is_signed_anew_without_waiting_for_its_expiry(
    local_svm: LocalSvmThread,
) -> None:
    payer, to = _funded(local_svm)
    rpc = RefusingFirst(local_svm.url)
    took = asyncio.run(send_transfer(rpc, payer, to, confirm_timeout=60))
    assert rpc.sends == 2
    assert took < 10, took
    assert _balance(local_svm, to) == SOL
