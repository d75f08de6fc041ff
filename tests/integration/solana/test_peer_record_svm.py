"""Peer records on the SBF build, through the local SVM's RPC front (``local_svm``) with the
project's own client: ``RunInstructions.set_peer_addrs`` / ``close_peer_record`` sent by
``TxSender`` (compute-unit limits from ``compute_units.json`` prepended), the account read back
with ``getAccountInfo`` and ``getMultipleAccounts`` and decoded by ``decode_peer_record``.

Also checks, against the program itself, that ``check_peer_addrs`` refuses exactly what the
program refuses (and names the same error), and that another wallet can neither overwrite nor
close a wallet's record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account

from psyche.localsvm import LocalSvmThread
from psyche.solana.budget import ComputeBudget, load_limits
from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import (
    ProgramClient,
    RunAccounts,
    RunInstructions,
    instance_pda,
    peer_record_pda,
)
from psyche.solana.layout import CoordinatorLayout
from psyche.solana.peer_record import (
    MAX_PEER_ADDR_LEN,
    MAX_PEER_ADDRS,
    PEER_RECORD_SPACE,
    PeerAddrError,
    PeerRecord,
    check_peer_addrs,
    decode_peer_record,
)
from psyche.solana.rpc import ProgramRejectedError, SolanaRpc, TxSender

ROOT = Path(__file__).resolve().parents[3]
IDL = ROOT / "idl" / "psyche_coordinator.json"
SOL = 10**9
ADDR = "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
ADDR_2 = "/ip6/2001:db8::7/udp/4001/quic-v1"
CONSTRAINT_SEEDS = 2006  # Anchor's ErrorCode::ConstraintSeeds

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 60) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def _program() -> ProgramClient:
    return ProgramClient(IdlCodec.load(IDL))


def _funded(node: LocalSvmThread) -> Keypair:
    kp = Keypair()
    node.airdrop(kp.pubkey(), 10 * SOL)
    return kp


def _sender(node: LocalSvmThread, program: ProgramClient, payer: Keypair) -> TxSender:
    """As the client sends: the wallet pays, the compute-unit limit of the table first."""
    return TxSender(
        [SolanaRpc(node.url)],
        payer,
        error_names=program.idl.error_name,
        attempts=1,
        prepare=ComputeBudget([program]),
    )


def _create_run(
    node: LocalSvmThread, program: ProgramClient, run_id: str, local_run: bool = False
) -> RunInstructions:
    authority, account = _funded(node), Keypair()
    layout = CoordinatorLayout(program.idl)
    ixs = RunInstructions(
        program, RunAccounts(instance_pda(program.program_id, run_id), account.pubkey())
    )

    async def go() -> None:
        rpc = SolanaRpc(node.url)
        create = create_account(
            CreateAccountParams(
                from_pubkey=authority.pubkey(),
                to_pubkey=account.pubkey(),
                lamports=await rpc.minimum_balance(layout.size),
                space=layout.size,
                owner=program.program_id,
            )
        )
        me = authority.pubkey()
        init = ixs.init_coordinator(me, me, me, run_id, "test", local_run)
        await _sender(node, program, authority).send([create, init], [account], label="create")
        await rpc.close()

    run(go())
    return ixs


async def _balance(rpc: SolanaRpc, key: Pubkey) -> int:
    return int((await rpc.call("getBalance", [str(key)]))["value"])


async def _read(rpc: SolanaRpc, program: ProgramClient, address: Pubkey) -> PeerRecord | None:
    """The record at ``address`` through getAccountInfo, cross-checked with getMultipleAccounts
    (owner: the coordinator program)."""
    data = await rpc.get_account(address)
    (many,) = await rpc.get_multiple_accounts([address])
    if data is None:
        assert many is None
        return None
    assert many is not None
    owner, same = many
    assert owner == program.program_id and same == data
    assert len(data) == PEER_RECORD_SPACE
    return decode_peer_record(program.idl, data)


async def _rejected(sender: TxSender, ix: Instruction, signer: Keypair) -> ProgramRejectedError:
    with pytest.raises(ProgramRejectedError) as e:
        await sender.send([ix], [signer], label="refused", confirm_timeout=10)
    return e.value


def test_publish_read_overwrite_close(local_svm: LocalSvmThread) -> None:
    node = local_svm
    program = _program()
    ixs = _create_run(node, program, "peer-svm")
    alice = _funded(node)
    pda = peer_record_pda(program.program_id, ixs.run.instance, alice.pubkey())
    rent_per_record = (128 + PEER_RECORD_SPACE) * 6960

    async def go() -> None:
        rpc = SolanaRpc(node.url)
        send = _sender(node, program, alice)
        assert await _read(rpc, program, pda) is None
        before = await _balance(rpc, alice.pubkey())

        # Publish: the record is created, the wallet pays the rent and the fee.
        sig = await send.send([ixs.set_peer_addrs(alice.pubkey(), [ADDR, ADDR_2])], label="set")
        tx = node.transaction(sig)
        assert tx is not None and tx.ok
        got = await _read(rpc, program, pda)
        assert got is not None
        assert (got.coordinator_instance, got.signer) == (ixs.run.instance, alice.pubkey())
        assert got.addrs == (ADDR, ADDR_2)
        assert got.updated_at > 0 and got.updated_slot >= 0
        assert await rpc.minimum_balance(PEER_RECORD_SPACE) == rent_per_record
        assert await _balance(rpc, pda) == rent_per_record
        assert await _balance(rpc, alice.pubkey()) == before - rent_per_record - tx.fee
        assert tx.compute_units <= load_limits()["set_peer_addrs"]

        # Overwrite later with the largest content: stamps move, size and deposit do not.
        node.advance_time(3)
        # Public targets: the run is not a local one.
        longest = [
            f"/ip4/203.0.113.{i}/" + "x" * (MAX_PEER_ADDR_LEN - 17) for i in range(MAX_PEER_ADDRS)
        ]
        mid = await _balance(rpc, alice.pubkey())
        sig = await send.send([ixs.set_peer_addrs(alice.pubkey(), longest)], label="overwrite")
        tx = node.transaction(sig)
        assert tx is not None and tx.ok
        again = await _read(rpc, program, pda)
        assert again is not None and again.addrs == tuple(longest)
        assert again.updated_at >= got.updated_at + 3 and again.updated_slot > got.updated_slot
        assert (again.bump, again.signer) == (got.bump, got.signer)
        assert await _balance(rpc, pda) == rent_per_record
        assert await _balance(rpc, alice.pubkey()) == mid - tx.fee

        # Zero addresses, then a short one over the long ones: the stale tail is ignored.
        await send.send([ixs.set_peer_addrs(alice.pubkey(), [])], label="empty")
        assert (await _read(rpc, program, pda)).addrs == ()  # type: ignore[union-attr]
        await send.send([ixs.set_peer_addrs(alice.pubkey(), ["/"])], label="short")
        assert (await _read(rpc, program, pda)).addrs == ("/",)  # type: ignore[union-attr]

        # Close: the deposit comes back, the account is gone.
        mid = await _balance(rpc, alice.pubkey())
        sig = await send.send([ixs.close_peer_record(alice.pubkey())], label="close")
        tx = node.transaction(sig)
        assert tx is not None and tx.ok
        assert tx.compute_units <= load_limits()["close_peer_record"]
        assert await _read(rpc, program, pda) is None
        assert await _balance(rpc, alice.pubkey()) == mid + rent_per_record - tx.fee
        await rpc.close()

    run(go())


def test_another_wallet_cannot_overwrite_or_close(local_svm: LocalSvmThread) -> None:
    node = local_svm
    program = _program()
    ixs = _create_run(node, program, "peer-svm-owner")
    alice, mallory = _funded(node), _funded(node)
    alice_pda = peer_record_pda(program.program_id, ixs.run.instance, alice.pubkey())
    mallory_pda = peer_record_pda(program.program_id, ixs.run.instance, mallory.pubkey())

    def aimed_at(ix: Instruction, index: int, address: Pubkey) -> Instruction:
        metas = list(ix.accounts)
        m = metas[index]
        metas[index] = AccountMeta(address, m.is_signer, m.is_writable)
        return Instruction(ix.program_id, bytes(ix.data), metas)

    async def go() -> None:
        rpc = SolanaRpc(node.url)
        await _sender(node, program, alice).send(
            [ixs.set_peer_addrs(alice.pubkey(), [ADDR])], label="alice"
        )
        kept = await _read(rpc, program, alice_pda)
        as_mallory = _sender(node, program, mallory)

        # Mallory's set_peer_addrs aimed at Alice's record: the PDA is derived from the signer.
        ix = aimed_at(ixs.set_peer_addrs(mallory.pubkey(), [ADDR_2]), 2, alice_pda)
        e = await _rejected(as_mallory, ix, mallory)
        assert e.code == CONSTRAINT_SEEDS
        # Mallory closing Alice's record.
        ix = aimed_at(ixs.close_peer_record(mallory.pubkey()), 1, alice_pda)
        e = await _rejected(as_mallory, ix, mallory)
        assert e.code == CONSTRAINT_SEEDS
        assert await _read(rpc, program, alice_pda) == kept

        # Her own record is hers, and separate.
        await as_mallory.send([ixs.set_peer_addrs(mallory.pubkey(), [ADDR_2])], label="mallory")
        assert (await _read(rpc, program, mallory_pda)).addrs == (ADDR_2,)  # type: ignore[union-attr]
        assert await _read(rpc, program, alice_pda) == kept
        # Both read in one getMultipleAccounts, as a reader of the run would.
        both = await rpc.get_multiple_accounts([alice_pda, mallory_pda, Pubkey.new_unique()])
        assert both[2] is None
        decoded = [decode_peer_record(program.idl, b[1]) for b in both[:2] if b is not None]
        assert [r.signer for r in decoded] == [alice.pubkey(), mallory.pubkey()]
        await rpc.close()

    run(go())


RULE_CASES: list[list[str]] = [
    [ADDR] * (MAX_PEER_ADDRS + 1),
    [""],
    ["/" + "a" * MAX_PEER_ADDR_LEN],
    ["/" + "é" * 64],
    ["/ip4/1.2.3.4 /tcp/1"],
    ["/a\tb"],
    ["/a\x7fb"],
    ["/dns/exämple.org"],
    ["a b"],
    ["ip4/1.2.3.4/tcp/1"],
    ["/ok", "x", "/" + "a" * MAX_PEER_ADDR_LEN],
    ["/ok", "/" + "a" * MAX_PEER_ADDR_LEN, "x"],
    ["/ip4/169.254.169.254/tcp/80"],
    ["/ip4/10.0.0.1/tcp/1/p2p/x/p2p-circuit"],
    ["/ip4/127.0.0.1/tcp/1"],
    ["/dns4/a.example/tcp/1"],
]
# Accepted in a local run only (issue 26, finding 5).
LOCAL_ONLY = {
    "/ip4/10.0.0.1/tcp/1/p2p/x/p2p-circuit",
    "/ip4/127.0.0.1/tcp/1",
    "/dns4/a.example/tcp/1",
}


@pytest.mark.parametrize("local_run", [False, True])
def test_check_peer_addrs_refuses_what_the_program_refuses(
    local_svm: LocalSvmThread, local_run: bool
) -> None:
    node = local_svm
    program = _program()
    ixs = _create_run(node, program, f"peer-svm-rules-{local_run}", local_run)
    w = _funded(node)
    pda = peer_record_pda(program.program_id, ixs.run.instance, w.pubkey())

    async def go() -> None:
        rpc = SolanaRpc(node.url)
        send = _sender(node, program, w)
        for addrs in RULE_CASES:
            if local_run and set(addrs) <= LOCAL_ONLY:
                continue
            with pytest.raises(PeerAddrError) as ours:
                check_peer_addrs(addrs, local=local_run)
            theirs = await _rejected(send, ixs.set_peer_addrs(w.pubkey(), addrs), w)
            assert theirs.name == ours.value.error, (addrs, theirs)
            assert await _read(rpc, program, pda) is None
        accepted: list[list[str]] = [[], ["/"], ["/!~"], [ADDR] * MAX_PEER_ADDRS, ["/" + "a" * 127]]
        if local_run:
            accepted += [[a] for a in sorted(LOCAL_ONLY)]
        for addrs in accepted:
            check_peer_addrs(addrs, local=local_run)
            await send.send([ixs.set_peer_addrs(w.pubkey(), addrs)], label="accepted")
            assert (await _read(rpc, program, pda)).addrs == tuple(addrs)  # type: ignore[union-attr]
        await rpc.close()

    run(go())
