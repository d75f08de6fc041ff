"""P2P reachability in the clients table of a Solana run: each epoch client's peer record (read
with one getMultipleAccounts from the local SVM, decoded by the client's own decoder) shows as
``no record``, ``no address``, ``direct``, ``relayed`` or ``direct + relayed``; a record that is
not the program's, does not decode, or names another wallet shows as ``bad record``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from solders.account import Account
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.explorer.peers import classify
from psyche.explorer.schema import open_engine
from psyche.explorer.solana import SolanaSource, SolanaTarget
from psyche.explorer.store import Store
from psyche.localsvm import LocalSvmThread
from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import default_idl_dir, instance_pda, peer_record_pda
from psyche.solana.layout import CoordinatorLayout
from psyche.solana.peer_record import PEER_RECORD_SPACE
from psyche.solana.snapshot import RunSnapshot
from support.configs import four_client_config
from unit.coordinator import support

IDL = default_idl_dir() / "psyche_coordinator.json"
PROGRAM = Pubkey.from_string(json.loads(IDL.read_text())["address"])
RUN = "explorer-p2p"
DIRECT = "/ip4/198.51.100.7/tcp/4001"
RELAYED = "/ip4/198.51.100.9/tcp/4001/p2p/12D3KooWRelay/p2p-circuit"


def test_classify() -> None:
    assert classify([]) == "no address"
    assert classify([DIRECT, "/dns4/a.example/tcp/1"]) == "direct"
    assert classify([RELAYED]) == "relayed"
    assert classify([DIRECT, RELAYED]) == "direct + relayed"


def _record(idl: IdlCodec, run: Pubkey, signer: bytes, addrs: list[str]) -> bytes:
    value = {"coordinator_instance": bytes(run), "signer": signer, "bump": 254,
             "updated_at": 1_700_000_000, "updated_slot": 5, "addrs": addrs}  # fmt: skip
    data = idl.encode_account("PeerRecord", value)
    return data + bytes(PEER_RECORD_SPACE - len(data))


@pytest.mark.skipif(not IDL.exists(), reason="no coordinator IDL")
def test_the_clients_table_shows_each_clients_peer_record(tmp_path: Path) -> None:
    idl = IdlCodec.load(IDL)
    if "PeerRecord" not in idl.account_discriminators:
        pytest.skip("this IDL has no PeerRecord account")
    layout = CoordinatorLayout(idl)
    sim = support.make_sim(four_client_config(init_min_clients=6, min_clients=2))
    support.to_warmup(sim, 6)
    clients = [c.id.signer for c in sim.coord.epoch_state.clients]
    account, run = Keypair().pubkey(), instance_pda(PROGRAM, RUN)
    zero = bytes(32)
    inst = {"bump": 255, "main_authority": zero, "join_authority": zero,
            "coordinator_account": bytes(account), "run_id": RUN, "local_run": False}  # fmt: skip
    records = {
        0: (PROGRAM, _record(idl, run, clients[0], [DIRECT])),
        1: (PROGRAM, _record(idl, run, clients[1], [RELAYED])),
        2: (PROGRAM, _record(idl, run, clients[2], [DIRECT, RELAYED])),
        3: (PROGRAM, _record(idl, run, clients[3], [])),
        4: (PROGRAM, _record(idl, run, clients[0], [DIRECT])),  # another wallet's record
    }  # client 5 published none
    expected = ["direct", "relayed", "direct + relayed", "no address", "bad record", "no record"]

    def put(svm: LocalSvmThread, key: Pubkey, data: bytes, owner: Pubkey = PROGRAM) -> None:
        acc = Account(lamports=10**11, data=data, owner=owner, executable=False, rent_epoch=0)
        svm.call(lambda s: s.chain.set_account(key, acc))

    with LocalSvmThread(rpc_port=0) as svm:
        put(svm, run, idl.encode_account("CoordinatorInstance", inst))
        sim.coord.run_id = RUN
        put(svm, account, layout.encode_account(RunSnapshot(nonce=1, coordinator=sim.coord)))
        for i, (owner, data) in records.items():
            put(svm, peer_record_pda(PROGRAM, run, Pubkey.from_bytes(clients[i])), data, owner)
        store = Store(open_engine(str(tmp_path / "db.sqlite")))

        async def go() -> None:
            src = SolanaSource(store, SolanaTarget(rpc=svm.url, run_id=RUN))
            assert await src.poll() == 1
            assert shown() == expected
            # A record the coordinator program does not own is not trusted.
            key = peer_record_pda(PROGRAM, run, Pubkey.from_bytes(clients[0]))
            put(svm, key, records[0][1], owner=Keypair().pubkey())
            put(svm, account, layout.encode_account(RunSnapshot(nonce=2, coordinator=sim.coord)))
            assert await src.poll() == 1
            await src.close()

        def shown() -> list[str]:
            got = store.get_run(store.runs(10)[0]["id"])
            assert got is not None
            by_id = {c["id"]: c["p2p"] for c in got["detail"]["clients"]}
            return [by_id[c.id.hex()] for c in sim.coord.epoch_state.clients]

        asyncio.run(go())
    assert shown() == ["bad record", *expected[1:]]
