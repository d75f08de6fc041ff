"""psyche-solana-client commands end to end against the RPC test double, with the real IDLs:
each sent transaction is decoded and its signers, accounts and arguments checked."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from psyche.cli.solana import solana
from psyche.coordinator import RunState
from psyche.solana.instructions import instance_pda
from psyche.solana.layout import CoordinatorLayout

from ...solana.idl_support import (
    IDL_DIR,
    ROOT,
    authorizer_idl,
    coordinator_idl,
    needs_authorizer_idl,
    needs_coordinator_idl,
    vector_states,
)
from ...solana.rpc_double import SolanaRpcDouble
from ...solana.test_layout import _snap

pytestmark = [needs_coordinator_idl, needs_authorizer_idl]
COMPUTE_BUDGET = "ComputeBudget111111111111111111111111111111"


class Node:
    """The RPC test double on its own event loop thread (the CLI runs its own asyncio.run)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.double = SolanaRpcDouble()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.call(self.double.start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def stop(self) -> None:
        self.call(self.double.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node()
    yield n
    n.stop()


def decoded(
    tx: Transaction,
) -> list[tuple[Pubkey, str, dict[str, Any], list[tuple[Pubkey, bool, bool]]]]:
    """(program, instruction name, args, [(account, signer, writable)]) per instruction."""
    msg = tx.message
    h = msg.header
    n_keys, n_sig = len(msg.account_keys), h.num_required_signatures

    def writable(i: int) -> bool:
        # solders 0.26 has no writability query on Message: read it off the header.
        if i < n_sig:
            return i < n_sig - h.num_readonly_signed_accounts
        return i - n_sig < n_keys - n_sig - h.num_readonly_unsigned_accounts

    out = []
    for cix in msg.instructions:
        program = msg.account_keys[cix.program_id_index]
        if str(program) == COMPUTE_BUDGET:
            continue  # the compute-unit limit every transaction asks for (test_budget.py)
        metas = [(msg.account_keys[i], msg.is_signer(i), writable(i)) for i in cix.accounts]
        data = bytes(cix.data)
        for idl in (coordinator_idl(), authorizer_idl()):
            if str(program) == idl.address:
                name, args = idl.decode_instruction(data)
                break
        else:
            name, args = "system", {}
        out.append((program, name, args, metas))
    return out


def invoke(node: Node, wallet: Keypair, *args: str) -> Any:
    env = {
        "RPC": node.double.url,
        "RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(wallet))),
        "PSYCHE_IDL_DIR": str(IDL_DIR),
    }
    res = CliRunner().invoke(solana, list(args), env=env)
    assert res.exit_code == 0, res.output
    return res.stdout  # the result; warnings (a public run's, issue 39) go to stderr


def serve_run(node: Node, wallet: Keypair, run_id: str = "r1") -> tuple[Pubkey, Pubkey]:
    idl = coordinator_idl()
    program = Pubkey.from_string(idl.address)
    instance, account = instance_pda(program, run_id), Keypair().pubkey()
    inst = {
        "bump": 255,
        "main_authority": bytes(wallet.pubkey()),
        "join_authority": bytes(wallet.pubkey()),
        "coordinator_account": bytes(account),
        "run_id": run_id,
        "local_run": True,
    }
    node.call(node.double.set_account(instance, idl.encode_account("CoordinatorInstance", inst)))
    _, coord = vector_states(1)[0]
    layout = CoordinatorLayout(idl)
    node.call(node.double.set_account(account, layout.encode_account(_snap(coord))))
    return instance, account


def test_create_run_creates_the_account_and_inits_in_one_transaction(node: Node) -> None:
    wallet = Keypair()
    out = json.loads(invoke(node, wallet, "create-run", "--run-id", "r1", "--client-version", "v7"))
    (tx,) = node.double.transactions
    (_, n1, _, _m1), (_, n2, args, m2) = decoded(tx)
    assert n1 == "system" and n2 == "init_coordinator"
    assert out["account_size"] == CoordinatorLayout(coordinator_idl()).size
    params = args["params"]
    assert params["run_id"] == "r1" and params["client_version"] == "v7"
    assert params["main_authority"] == bytes(wallet.pubkey())
    keys = {str(k) for k, _, _ in m2}
    assert out["coordinator_account"] in keys and out["coordinator_instance"] in keys
    assert tx.message.account_keys[0] == wallet.pubkey()
    # The RPC double is on loopback: a local run unless the creator says otherwise.
    assert params["local_run"] is True and out["local_run"] is True


@pytest.mark.parametrize(("flag", "local"), [("--public-run", False), ("--local-run", True)])
def test_create_run_local_or_public_as_the_creator_says(node: Node, flag: str, local: bool) -> None:
    """Issue 26, finding 5: the run's local_run flag (peer records may name loopback, private
    and DNS targets) is the creator's explicit choice, stored at init_coordinator."""
    out = json.loads(invoke(node, Keypair(), "create-run", "--run-id", "r1", flag))
    (tx,) = node.double.transactions
    (_, _, args, _) = decoded(tx)[1]
    assert args["params"]["local_run"] is local and out["local_run"] is local


def test_admin_commands_send_the_right_instructions(node: Node) -> None:
    wallet = Keypair()
    _instance, account = serve_run(node, wallet)
    invoke(node, wallet, "set-paused", "--run-id", "r1", "--resume")
    invoke(node, wallet, "tick", "--run-id", "r1", "--count", "2", "--ms-interval", "1")
    invoke(
        node,
        wallet,
        "update-config",
        "--run-id",
        "r1",
        "--config-path",
        str(ROOT / "config" / "tiny" / "state.toml"),
    )
    invoke(
        node,
        wallet,
        "set-future-epoch-rates",
        "--run-id",
        "r1",
        "--earning-rate-total-shared",
        "100",
    )
    invoke(node, wallet, "close-run", "--run-id", "r1")
    names = [decoded(tx)[0][1] for tx in node.double.transactions]
    assert names == [
        "set_paused",
        "tick",
        "tick",
        "update",
        "set_future_epoch_rates",
        "free_coordinator",
    ]
    first = decoded(node.double.transactions[0])[0]
    assert first[2] == {"paused": False}
    assert (wallet.pubkey(), True, False) in first[3] or (wallet.pubkey(), True, True) in first[3]
    assert any(k == account and w for k, _, w in first[3])
    update = decoded(node.double.transactions[3])[0][2]
    assert update["config"]["total_steps"] > 0 and "LLM" in update["model"]
    assert update["metadata"] is None and update["progress"] is None


def test_json_dump_run(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet)
    out = json.loads(invoke(node, wallet, "json-dump-run", "--run-id", "r1"))
    assert out["nonce"] == 3 and out["client_version"] == "v1.2"
    assert out["coordinator"]["run_state"] in RunState.__members__


def test_join_authorization_commands(node: Node) -> None:
    wallet, grantee = Keypair(), Keypair()
    invoke(node, wallet, "join-authorization-create", "--authorizer", str(grantee.pubkey()))
    (tx,) = node.double.transactions
    (_, n1, a1, _), (_, n2, a2, _) = decoded(tx)
    assert (n1, n2) == ("authorization_create", "authorization_grantor_update")
    assert a1["params"]["scope"] == b"CoordinatorJoinRun"
    assert a1["params"]["grantee"] == bytes(grantee.pubkey())
    assert a2["params"]["active"] is True
