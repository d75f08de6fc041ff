"""The Treasurer's client side (client/psyche/solana/programs/treasurer_commands.py,
cli/solana_treasurer.py) against the RPC test double with the real IDLs: PDAs and the default
index, which commands go through ``run_update`` (and which do not), the flags and their env
twins, and the errors a user sees before anything is sent. The real programs run in
tests/integration/solana/test_treasurer_svm.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import click
import pytest
from click.testing import CliRunner
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from psyche.cli.solana import solana
from psyche.cli.solana_treasurer import parse_mint_to
from psyche.protocol.identity import NodeIdentity
from psyche.solana.errors import ChainError
from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import instance_pda
from psyche.solana.layout import CoordinatorLayout
from psyche.solana.programs import coordinator_commands as admin
from psyche.solana.programs import treasurer_commands as treasurer
from psyche.solana.programs.treasurer import (
    TREASURER_PARTICIPANT_SEED,
    TREASURER_RUN_COLLATERAL_SEED,
    TREASURER_RUN_SEED,
    default_treasurer_index,
    participant_pda,
    run_collateral_pda,
)
from psyche.solana.programs.treasurer_commands import run_pda
from psyche.solana.session import Endpoints, Session
from psyche.solana.snapshot import RegisteredClient
from psyche.solana.tokens import (
    ACCOUNT_LEN,
    ASSOCIATED_TOKEN_PROGRAM_ID,
    MINT_LEN,
    TOKEN_PROGRAM_ID,
    associated_token_address,
)

from .idl_support import IDL_DIR, ROOT, coordinator_idl, vector_states
from .rpc_double import SolanaRpcDouble
from .test_layout import _snap

TREASURER_IDL = IDL_DIR / "psyche_treasurer.json"
TINY = ROOT / "config" / "tiny" / "state.toml"
COMPUTE_BUDGET = Pubkey.from_string("ComputeBudget111111111111111111111111111111")
SYSTEM = "11111111111111111111111111111111"


def treasurer_idl() -> IdlCodec:
    # Fails (never skips) while the IDL is missing or a placeholder: the commands need it.
    return IdlCodec.load(TREASURER_IDL)


def treasurer_program() -> Pubkey:
    return Pubkey.from_string(treasurer_idl().address)


def coordinator_program() -> Pubkey:
    return Pubkey.from_string(coordinator_idl().address)


# --- addresses ----------------------------------------------------------------------------------


def test_default_index_is_the_first_8_bytes_le_of_sha256_of_the_run_id() -> None:
    assert default_treasurer_index("tiny") == 7144881265989865609
    digest = hashlib.sha256(b"docs-run").digest()
    assert default_treasurer_index("docs-run") == struct.unpack("<Q", digest[:8])[0]
    assert default_treasurer_index("ünï") == int.from_bytes(
        hashlib.sha256("ünï".encode()).digest()[:8], "little"
    )


def test_pdas_are_derived_from_the_documented_seeds() -> None:
    program = Pubkey.from_string("3scS2tudP7vEQrbAA9yXKgNATr9WMVCHHfTrHtRcJD35")
    user = Keypair().pubkey()
    run = run_pda(program, 7)
    assert run == Pubkey.find_program_address([b"Run", bytes([7, 0, 0, 0, 0, 0, 0, 0])], program)[0]
    assert run != run_pda(program, 8) and not run.is_on_curve()
    assert (
        run_collateral_pda(program, run)
        == (Pubkey.find_program_address([b"RunCollateral", bytes(run)], program)[0])
    )
    assert (
        participant_pda(program, run, user)
        == (Pubkey.find_program_address([b"Participant", bytes(run), bytes(user)], program)[0])
    )
    max_index = run_pda(program, 2**64 - 1)
    assert max_index == Pubkey.find_program_address([b"Run", b"\xff" * 8], program)[0]
    with pytest.raises(ChainError, match="not a u64"):
        run_pda(program, 2**64)


def test_seeds_equal_the_idl_constants() -> None:
    constants = {c["name"]: c for c in treasurer_idl().idl["constants"]}

    def value(name: str) -> bytes:
        c = constants[name]
        assert c["type"] == "bytes", c
        return bytes(json.loads(c["value"]))

    assert value("RUN_SEEDS_PREFIX") == TREASURER_RUN_SEED
    assert value("RUN_COLLATERAL_SEEDS_PREFIX") == TREASURER_RUN_COLLATERAL_SEED
    assert value("PARTICIPANT_SEEDS_PREFIX") == TREASURER_PARTICIPANT_SEED


# --- an RPC test double that knows account owners -----------------------------------------------


@dataclass
class OwnedDouble(SolanaRpcDouble):
    """The RPC double, with an owner per account (the Treasurer's accounts are recognised by
    their owner)."""

    owners: dict[str, str] = field(default_factory=dict)

    def handle(self, method: str, params: list[Any]) -> Any:
        if method == "getAccountInfo" and params[0] in self.owners:
            self.requests.append(method)
            data = self.accounts.get(params[0])
            value = None
            if data is not None:
                value = {**self._account_value(data), "owner": self.owners[params[0]]}
            return {"context": {"slot": self.slot}, "value": value}
        return super().handle(method, params)


class Node:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.double = OwnedDouble()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.call(self.double.start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def set(self, key: Pubkey, data: bytes, owner: Pubkey | None = None) -> None:
        if owner is not None:
            self.double.owners[str(key)] = str(owner)
        self.call(self.double.set_account(key, data))

    def session(self, wallet: Keypair) -> Session:
        return Session(Endpoints(self.double.url), wallet, idl_dir=IDL_DIR)

    def run(self, wallet: Keypair, coro_fn: Any) -> Any:
        async def go() -> Any:
            s = self.session(wallet)
            try:
                return await coro_fn(s)
            finally:
                await s.close()

        return asyncio.run(go())

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
) -> list[tuple[str, str, dict[str, Any], list[tuple[Pubkey, bool, bool]]]]:
    """(program label, instruction name, args, metas) of each instruction but compute budget."""
    msg = tx.message
    h = msg.header
    n_keys, n_sig = len(msg.account_keys), h.num_required_signatures

    def writable(i: int) -> bool:
        if i < n_sig:
            return i < n_sig - h.num_readonly_signed_accounts
        return i - n_sig < n_keys - n_sig - h.num_readonly_unsigned_accounts

    idls = {"coordinator": coordinator_idl(), "treasurer": treasurer_idl()}
    out = []
    for cix in msg.instructions:
        program = msg.account_keys[cix.program_id_index]
        if program == COMPUTE_BUDGET:
            continue
        metas = [(msg.account_keys[i], msg.is_signer(i), writable(i)) for i in cix.accounts]
        label, name, args = str(program), "", {}
        for known, idl in idls.items():
            if str(program) == idl.address:
                label = known
                name, args = idl.decode_instruction(bytes(cix.data))
        out.append((label, name, args, metas))
    return out


def compute_limit(tx: Transaction) -> int | None:
    msg = tx.message
    for cix in msg.instructions:
        if msg.account_keys[cix.program_id_index] == COMPUTE_BUDGET and cix.data[0] == 2:
            return int.from_bytes(bytes(cix.data[1:5]), "little")
    return None


@dataclass
class Served:
    run_id: str
    wallet: Keypair
    instance: Pubkey
    account: Pubkey
    run: Pubkey
    mint: Pubkey


def token_account(mint: Pubkey, owner: Pubkey, amount: int) -> bytes:
    data = bytearray(ACCOUNT_LEN)
    data[:32], data[32:64] = bytes(mint), bytes(owner)
    struct.pack_into("<Q", data, 64, amount)
    data[108] = 1  # initialized
    return bytes(data)


def mint_account(decimals: int = 6) -> bytes:
    data = bytearray(MINT_LEN)
    data[44], data[45] = decimals, 1
    return bytes(data)


def serve_run(
    node: Node,
    wallet: Keypair,
    run_id: str = "r1",
    *,
    through_treasurer: bool = True,
    run_owner: Pubkey | None = None,
    run_instance: Pubkey | None = None,
    rate: int = 7,
    clients: list[RegisteredClient] | None = None,
    escrow: int = 0,
) -> Served:
    """A configured run whose main authority is the Treasurer's Run (or the wallet)."""
    cidl = coordinator_idl()
    instance = instance_pda(coordinator_program(), run_id)
    account = Keypair().pubkey()
    mint = Keypair().pubkey()
    index = default_treasurer_index(run_id)
    run = run_pda(treasurer_program(), index)
    inst = {
        "bump": 255,
        "main_authority": bytes(run if through_treasurer else wallet.pubkey()),
        "join_authority": bytes(wallet.pubkey()),
        "coordinator_account": bytes(account),
        "run_id": run_id,
        "local_run": False,
    }
    node.set(instance, cidl.encode_account("CoordinatorInstance", inst))
    _, coord = vector_states(1)[0]
    snap = _snap(coord)
    if clients is not None:
        snap.clients = clients
    node.set(account, CoordinatorLayout(cidl).encode_account(snap))
    if through_treasurer:
        value = {
            "bump": 254,
            "index": index,
            "main_authority": bytes(wallet.pubkey()),
            "join_authority": bytes(wallet.pubkey()),
            "coordinator_instance": bytes(run_instance or instance),
            "coordinator_account": bytes(account),
            "collateral_mint": bytes(mint),
            "collateral_per_point": rate,
            "total_claimed_points": 0,
            "total_claimed_collateral": 0,
            "wind_down_at": 0,
        }
        data = treasurer_idl().encode_account("Run", value)
        node.set(run, data, run_owner or treasurer_program())
        collateral = run_collateral_pda(treasurer_program(), run)
        node.set(collateral, token_account(mint, run, escrow), TOKEN_PROGRAM_ID)
        node.set(mint, mint_account(), TOKEN_PROGRAM_ID)
    return Served(run_id, wallet, instance, account, run, mint)


# --- routing ------------------------------------------------------------------------------------


def test_a_plain_run_is_not_the_treasurers_and_costs_no_extra_read(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet, through_treasurer=False)
    assert node.run(wallet, lambda s: treasurer.treasurer_run(s, "r1")) is None
    assert node.double.requests == ["getAccountInfo"]  # the instance only
    node.run(wallet, lambda s: admin.set_paused(s, "r1", False))
    (tx,) = node.double.transactions
    ((label, name, args, metas),) = decoded(tx)
    assert (label, name, args) == ("coordinator", "set_paused", {"paused": False})
    assert metas[0] == (wallet.pubkey(), True, True)  # the authority (and fee payer)
    out = node.run(wallet, lambda s: admin.dump_run(s, "r1"))
    assert out["main_authority"] == str(wallet.pubkey()) and out["treasurer"] is None


def test_set_paused_of_a_treasurer_run_is_a_run_update(node: Node) -> None:
    wallet = Keypair()
    sv = serve_run(node, wallet)
    found = node.run(wallet, lambda s: treasurer.treasurer_run(s, "r1"))
    assert found is not None and found.address == sv.run and found.collateral_per_point == 7
    assert found.main_authority == wallet.pubkey() and found.collateral_mint == sv.mint
    node.run(wallet, lambda s: admin.set_paused(s, "r1", False))
    (tx,) = node.double.transactions
    ((label, name, args, metas),) = decoded(tx)
    assert (label, name) == ("treasurer", "run_update")
    params = args["params"]
    assert params["paused"] is False
    assert all(v is None for k, v in params.items() if k != "paused")
    # Flags as the transaction holds them: the authority is also the fee payer (writable).
    assert metas == [
        (wallet.pubkey(), True, True),
        (sv.run, False, False),
        (sv.instance, False, False),
        (sv.account, False, True),
        (coordinator_program(), False, False),
    ]
    # No table row yet for run_update: its own work plus the set_paused it calls.
    limit = compute_limit(tx)
    assert limit is not None and limit >= 450_000


def test_update_config_and_client_version_are_one_run_update(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet)
    sigs = node.run(
        wallet,
        lambda s: admin.update_config(
            s, "r1", config_path=str(TINY), client_version="v9", metadata={"name": "Tiny"}
        ),
    )
    assert len(sigs) == 1
    (tx,) = node.double.transactions
    ((label, name, args, _),) = decoded(tx)
    assert (label, name) == ("treasurer", "run_update")
    p = args["params"]
    assert p["config"]["min_clients"] == 2 and "LLM" in p["model"]
    assert p["client_version"] == "v9"
    assert p["metadata"]["name"]["bytes"].rstrip(b"\0") == b"Tiny"
    assert p["metadata"]["description"]["bytes"].rstrip(b"\0") == b"d"  # kept from the account
    assert p["progress"] is None and p["paused"] is None


def test_restart_from_step_of_a_treasurer_run_sends_the_progress(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet)
    node.run(wallet, lambda s: admin.update_config(s, "r1", restart_from_step=1))
    (tx,) = node.double.transactions
    ((_, name, args, _),) = decoded(tx)
    assert name == "run_update"
    progress = args["params"]["progress"]
    assert progress["step"] == 1 and progress["epoch_start_data_index"] == 0
    assert all(v is None for k, v in args["params"].items() if k != "progress")


def test_set_future_epoch_rates_of_a_treasurer_run(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet)
    node.run(wallet, lambda s: admin.set_future_epoch_rates(s, "r1", 3000, None))
    (tx,) = node.double.transactions
    ((_, name, args, _),) = decoded(tx)
    assert name == "run_update"
    assert args["params"]["epoch_earning_rate_total_shared"] == 3000
    assert args["params"]["epoch_slashing_rate_per_client"] is None
    with pytest.raises(ChainError, match="earning rate, a slashing rate or both"):
        node.run(wallet, lambda s: admin.set_future_epoch_rates(s, "r1", None, None))


def test_a_run_account_not_owned_by_the_treasurer_is_not_routed(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet, run_owner=Pubkey.from_string(SYSTEM))
    assert node.run(wallet, lambda s: treasurer.treasurer_run(s, "r1")) is None


def test_a_run_of_another_coordinator_instance_is_not_routed(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet, run_instance=instance_pda(coordinator_program(), "other"))
    assert node.run(wallet, lambda s: treasurer.treasurer_run(s, "r1")) is None


def test_only_the_runs_main_authority_may_update(node: Node) -> None:
    owner, stranger = Keypair(), Keypair()
    sv = serve_run(node, owner)
    with pytest.raises(ChainError) as e:
        node.run(stranger, lambda s: admin.set_paused(s, "r1", True))
    assert f"only its main authority {owner.pubkey()} can update it" in str(e.value)
    assert str(sv.run) in str(e.value)
    assert node.double.transactions == []


def test_json_dump_run_names_the_treasurer_run(node: Node) -> None:
    wallet = Keypair()
    sv = serve_run(node, wallet)
    out = node.run(wallet, lambda s: admin.dump_run(s, "r1"))
    assert out["main_authority"] == str(sv.run)
    assert out["treasurer"]["run"] == str(sv.run)
    assert out["treasurer"]["main_authority"] == str(wallet.pubkey())
    assert out["treasurer"]["collateral_per_point"] == 7


# --- claims: what is refused before sending -----------------------------------------------------


def registered(who: Keypair, earned: int, slashed: int = 0) -> RegisteredClient:
    me = bytes(who.pubkey())
    return RegisteredClient(NodeIdentity(me, me), 1, earned=earned, slashed=slashed)


def test_claim_with_an_escrow_too_small_says_how_much_is_needed(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet, rate=7, clients=[registered(wallet, 10)], escrow=5)
    with pytest.raises(ChainError) as e:
        node.run(wallet, lambda s: treasurer.claim_rewards(s, "r1", 3))
    assert "holds 5 base units; 3 points × 7 need 21 (16 short)" in str(e.value)
    with pytest.raises(ChainError, match="cannot claim 11 points: 10 are claimable"):
        node.run(wallet, lambda s: treasurer.claim_rewards(s, "r1", 11))
    assert node.double.transactions == []


def test_claim_with_nothing_claimable(node: Node) -> None:
    wallet, stranger = Keypair(), Keypair()
    serve_run(node, wallet, clients=[registered(wallet, 10, slashed=10)], escrow=1000)
    with pytest.raises(ChainError, match=r"nothing to claim .* earned 10, slashed 10"):
        node.run(wallet, lambda s: treasurer.claim_rewards(s, "r1"))
    with pytest.raises(ChainError, match="not registered in the run"):
        node.run(stranger, lambda s: treasurer.claim_rewards(s, "r1"))


def test_claim_sends_participant_create_token_account_and_claim(node: Node) -> None:
    wallet = Keypair()
    sv = serve_run(node, wallet, rate=7, clients=[registered(wallet, 10)], escrow=1000)
    out = node.run(wallet, lambda s: treasurer.claim_rewards(s, "r1"))
    assert out["points_claimed"] == 10 and out["amount_paid"] == 70
    (tx,) = node.double.transactions
    (create, ata, claim) = decoded(tx)
    me = wallet.pubkey()
    participant = participant_pda(treasurer_program(), sv.run, me)
    dest = associated_token_address(me, sv.mint)
    assert create[1] == "participant_create"
    system = Pubkey.from_string(SYSTEM)
    # Flags as the transaction holds them (the claim writes the run).
    assert create[3] == [
        (me, True, True), (me, True, True), (sv.run, False, True), (participant, False, True),
        (system, False, False),
    ]  # fmt: skip
    assert ata[0] == str(ASSOCIATED_TOKEN_PROGRAM_ID) and ata[3][1][0] == dest
    assert claim[1] == "participant_claim" and claim[2] == {"params": {"claim_points": 10}}
    assert [m[0] for m in claim[3]] == [
        me, dest, sv.run, run_collateral_pda(treasurer_program(), sv.run), participant,
        sv.account, TOKEN_PROGRAM_ID,
    ]  # fmt: skip


def test_claim_and_top_up_of_a_plain_run_are_refused(node: Node) -> None:
    wallet = Keypair()
    serve_run(node, wallet, through_treasurer=False)
    with pytest.raises(ChainError, match="was not created through the Treasurer"):
        node.run(wallet, lambda s: treasurer.claim_rewards(s, "r1"))
    with pytest.raises(ChainError, match="was not created through the Treasurer"):
        node.run(wallet, lambda s: treasurer.top_up_rewards(s, "r1", 5))


def test_top_up_beyond_the_wallets_balance_is_refused(node: Node) -> None:
    wallet = Keypair()
    sv = serve_run(node, wallet)
    source = associated_token_address(wallet.pubkey(), sv.mint)
    node.set(source, token_account(sv.mint, wallet.pubkey(), 4), TOKEN_PROGRAM_ID)
    with pytest.raises(ChainError, match=f"{source} of mint {sv.mint} holds 4 base units; 5"):
        node.run(wallet, lambda s: treasurer.top_up_rewards(s, "r1", 5))
    node.run(wallet, lambda s: treasurer.top_up_rewards(s, "r1", 4))
    (tx,) = node.double.transactions
    ((label, _, _, metas),) = decoded(tx)
    assert label == str(TOKEN_PROGRAM_ID)
    assert [m[0] for m in metas] == [
        source,
        run_collateral_pda(treasurer_program(), sv.run),
        wallet.pubkey(),
    ]


# --- create-run through the Treasurer -----------------------------------------------------------


CLEARED_ENV = (
    "TREASURER_COLLATERAL_MINT", "TREASURER_INDEX", "TREASURER_COLLATERAL_PER_POINT",
    "TREASURER_CLAIM_POINTS", "TREASURER_TOP_UP_AMOUNT", "TEST_MINT_DECIMALS", "TEST_MINT_TO",
    "RUN_NAME", "RUN_DESCRIPTION", "JOIN_AUTHORITY",
)  # fmt: skip


CLEARED_ENV = (
    "TREASURER_COLLATERAL_MINT", "TREASURER_INDEX", "TREASURER_COLLATERAL_PER_POINT",
    "TREASURER_CLAIM_POINTS", "TREASURER_TOP_UP_AMOUNT", "TEST_MINT_DECIMALS", "TEST_MINT_TO",
    "RUN_NAME", "RUN_DESCRIPTION", "JOIN_AUTHORITY",
)  # fmt: skip


def cli(node: Node, wallet: Keypair | None, *args: str, **env: str) -> Any:
    base: dict[str, str | None] = {
        "RPC": node.double.url,
        "RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(wallet))) if wallet else None,
        "WALLET_PRIVATE_KEY_PATH": None,
        "PSYCHE_IDL_DIR": str(IDL_DIR),
        **dict.fromkeys(CLEARED_ENV),
    }
    return CliRunner().invoke(solana, list(args), env={**base, **env})


def test_create_run_through_the_treasurer_in_one_transaction(node: Node) -> None:
    wallet, joiner, mint = Keypair(), Keypair(), Keypair().pubkey()
    node.set(mint, mint_account(9), TOKEN_PROGRAM_ID)
    res = cli(
        node, wallet, "create-run", "--run-id", "t1", "--client-version", "v3",
        "--join-authority", str(joiner.pubkey()), "--name", "Paid run",
        "--treasurer-collateral-mint", str(mint),
        TREASURER_INDEX="42", TREASURER_COLLATERAL_PER_POINT="5",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    run = run_pda(treasurer_program(), 42)
    assert out["treasurer_run"] == str(run) and out["treasurer_index"] == 42
    assert out["collateral_per_point"] == 5 and out["collateral_decimals"] == 9
    (tx,) = node.double.transactions
    (create, init, update) = decoded(tx)
    assert create[0] == SYSTEM
    assert init[1] == "run_create"
    assert init[2]["params"] == {
        "index": 42, "run_id": "t1", "client_version": "v3",
        "join_authority": bytes(joiner.pubkey()), "collateral_per_point": 5,
        # The RPC test double is on loopback: create-run's default makes the run local.
        "local_run": True,
    }  # fmt: skip
    me = wallet.pubkey()
    account = Pubkey.from_string(out["coordinator_account"])
    assert init[3] == [
        (me, True, True), (me, True, True), (run, False, True), (mint, False, False),
        (run_collateral_pda(treasurer_program(), run), False, True),
        (instance_pda(coordinator_program(), "t1"), False, True), (account, True, True),
        (coordinator_program(), False, False), (TOKEN_PROGRAM_ID, False, False),
        (Pubkey.from_string(SYSTEM), False, False),
    ]  # fmt: skip
    assert update[1] == "run_update"
    assert update[2]["params"]["metadata"]["name"]["bytes"].rstrip(b"\0") == b"Paid run"


def test_create_run_with_the_longest_fields_fits_one_transaction(node: Node) -> None:
    """Run id (32 bytes), client version (96), name (64) and description (280) at their limits:
    create_account, run_create and the metadata's run_update still fit in one transaction."""
    wallet, mint = Keypair(), Keypair().pubkey()
    node.set(mint, mint_account(), TOKEN_PROGRAM_ID)
    res = cli(
        node, wallet, "create-run", "--run-id", "r" * 32, "--client-version", "v" * 96,
        "--name", "n" * 64, "--description", "d" * 280, "--treasurer-collateral-mint", str(mint),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (tx,) = node.double.transactions
    assert [ix[1] for ix in decoded(tx)] == ["", "run_create", "run_update"]
    assert len(bytes(tx)) <= 1232  # Solana's packet size


def test_create_run_refuses_an_existing_run_or_index(node: Node) -> None:
    wallet = Keypair()
    sv = serve_run(node, wallet)
    res = cli(node, wallet, "create-run", "--run-id", "r1", "--treasurer-collateral-mint",
              str(sv.mint))  # fmt: skip
    assert res.exit_code == 1 and "run 'r1' exists already" in res.output
    res = cli(node, wallet, "create-run", "--run-id", "r2", "--treasurer-collateral-mint",
              str(sv.mint), "--treasurer-index", str(default_treasurer_index("r1")))  # fmt: skip
    assert res.exit_code == 1
    assert f"the Treasurer's Run of index {default_treasurer_index('r1')} ({sv.run})" in res.output
    assert node.double.transactions == []


def test_create_run_refuses_a_missing_mint_and_a_zero_rate(node: Node) -> None:
    wallet, mint = Keypair(), Keypair().pubkey()
    res = cli(
        node, wallet, "create-run", "--run-id", "t1", "--treasurer-collateral-mint", str(mint)
    )
    assert res.exit_code == 1 and f"mint {mint} does not exist" in res.output
    res = cli(node, wallet, "create-run", "--run-id", "t1", "--treasurer-collateral-mint",
              str(mint), "--treasurer-collateral-per-point", "0")  # fmt: skip
    assert res.exit_code == 2 and "--treasurer-collateral-per-point" in res.output
    assert node.double.transactions == []


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--treasurer-index", "3"], {}),
        ([], {"TREASURER_COLLATERAL_PER_POINT": "4"}),
    ],
)
def test_treasurer_flags_need_a_mint(node: Node, args: list[str], env: dict[str, str]) -> None:
    res = cli(node, Keypair(), "create-run", "--run-id", "t1", *args, **env)
    assert res.exit_code == 2 and "needs --treasurer-collateral-mint" in res.output
    assert node.double.transactions == []


def test_claim_and_top_up_flags_and_env_twins(node: Node) -> None:
    res = cli(node, Keypair(), "treasurer-claim-rewards", "--run-id", "r1", "--points", "0")
    assert res.exit_code == 2 and "--points" in res.output
    res = cli(node, Keypair(), "treasurer-top-up-rewards", "--run-id", "r1")
    assert res.exit_code == 2 and "--amount" in res.output
    res = cli(node, Keypair(), "treasurer-top-up-rewards", "--run-id", "r1",
              TREASURER_TOP_UP_AMOUNT="-1")  # fmt: skip
    assert res.exit_code == 2
    wallet = Keypair()
    serve_run(node, wallet, clients=[registered(wallet, 10)], escrow=1000)
    res = cli(node, wallet, "treasurer-claim-rewards", "--run-id", "r1",
              TREASURER_CLAIM_POINTS="4")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["points_claimed"] == 4


def test_mint_to_parsing() -> None:
    a, b = Keypair().pubkey(), Keypair().pubkey()
    assert parse_mint_to((f"{a}=5", f"{b}=7 {a}=1")) == [(a, 5), (b, 7), (a, 1)]
    for bad, message in [
        (f"{a}", "is not PUBKEY=AMOUNT"),
        (f"{a}=x", "is not a whole number"),
        (f"{a}=0", "must be 1..=2^64-1"),
        (f"{a}={2**64}", "must be 1..=2^64-1"),
        ("nope=1", "is not a base58 public key"),
    ]:
        with pytest.raises(click.BadParameter, match=re.escape(message)):
            parse_mint_to((bad,))


def test_create_test_mint_mints_to_each_holder(node: Node) -> None:
    wallet, a, b = Keypair(), Keypair().pubkey(), Keypair().pubkey()
    res = cli(node, wallet, "create-test-mint", "--decimals", "6", "--mint-to", f"{a}=5",
              TEST_MINT_TO=f"{b}=7")  # fmt: skip
    assert res.exit_code == 0, res.output
    mint = Pubkey.from_string(json.loads(res.stdout)["mint"])
    create_tx, mint_tx = node.double.transactions
    (create, init) = decoded(create_tx)
    assert create[0] == SYSTEM and init[0] == str(TOKEN_PROGRAM_ID)
    assert create_tx.message.account_keys[1] == mint
    labels = [ix[0] for ix in decoded(mint_tx)]
    assert labels == [str(ASSOCIATED_TOKEN_PROGRAM_ID), str(TOKEN_PROGRAM_ID)]  # flag wins
    (_, _, _, metas) = decoded(mint_tx)[1]
    assert metas[1][0] == associated_token_address(a, mint)
    res = cli(node, wallet, "create-test-mint", "--decimals", "256")
    assert res.exit_code == 2
