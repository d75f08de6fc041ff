"""The Solana source against the local SVM's RPC front: the coordinator account decoded with the
project's layout and stored once per nonce, the account's transactions paged with
getSignaturesForAddress and stored once, and bad input (a malformed account, an unknown account
version, an undecodable transaction) refused as one BadInput while the indexer goes on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from solders.account import Account
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.explorer.schema import open_engine, states, transactions
from psyche.explorer.solana import SolanaSource, SolanaTarget
from psyche.explorer.sources import BadInput
from psyche.explorer.store import Store
from psyche.localsvm import LocalSvmThread
from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import default_idl_dir, instance_pda
from psyche.solana.layout import CoordinatorLayout
from psyche.solana.snapshot import RunSnapshot

from ..support_explorer import count, make_coordinator

IDL = default_idl_dir() / "psyche_coordinator.json"
PROGRAM = Pubkey.from_string(json.loads(IDL.read_text())["address"])
pytestmark = pytest.mark.skipif(not IDL.exists(), reason="no coordinator IDL")


def _put(svm: LocalSvmThread, key: Pubkey, data: bytes) -> None:
    acc = Account(lamports=10**11, data=data, owner=PROGRAM, executable=False, rent_epoch=0)
    svm.call(lambda s: s.chain.set_account(key, acc))


def test_accounts_and_transactions_are_indexed_once_and_bad_input_refused(tmp_path: Path) -> None:
    idl = IdlCodec.load(IDL)
    layout = CoordinatorLayout(idl)
    account = Keypair().pubkey()
    zero = bytes(32)
    inst = {"bump": 255, "main_authority": zero, "join_authority": zero,
            "coordinator_account": bytes(account), "run_id": "explorer-run",
            "local_run": False}  # fmt: skip
    c = make_coordinator("explorer-run")

    def snap(nonce: int, version: int = 2) -> bytes:
        return layout.encode_account(RunSnapshot(nonce=nonce, coordinator=c), version=version)

    async def poll(src: SolanaSource) -> Any:
        return await src.poll()

    with LocalSvmThread(rpc_port=0) as svm:
        _put(
            svm,
            instance_pda(PROGRAM, "explorer-run"),
            idl.encode_account("CoordinatorInstance", inst),
        )
        store = Store(open_engine(str(tmp_path / "db.sqlite")))
        target = SolanaTarget(rpc=svm.url, run_id="explorer-run")

        async def go() -> None:
            src = SolanaSource(store, target)
            _put(svm, account, b"\x01" * 100)
            with pytest.raises(BadInput, match="100 bytes"):
                await src.poll()
            _put(svm, account, snap(1, version=99))
            with pytest.raises(BadInput, match="version 99"):
                await src.poll()
            _put(svm, account, snap(1))
            assert await src.poll() == 1
            assert await src.poll() == 0
            svm.airdrop(account, 5)  # a transaction naming the account (not a coordinator one)
            svm.airdrop(account, 6)
            _put(svm, account, snap(2))
            assert await src.poll() == 3  # the new state and two transactions
            assert await src.poll() == 0
            with pytest.raises(BadInput, match="undecodable"):
                src.decode_transaction("sig", {"transaction": ["!!not base64", "base64"]})
            calls = src.calls
            await src.close()
            assert calls < 40

        asyncio.run(go())
    run = store.runs(10)[0]
    assert (run["backend"], run["run_id"], run["phase"]) == (
        "solana",
        "explorer-run",
        "WaitingForMembers",
    )
    assert count(store, states) == 2 and count(store, transactions) == 2
    assert {t["instruction"] for t in store.transactions(run["id"], 10)} == {"other"}
