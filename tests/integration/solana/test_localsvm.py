"""The local SVM (``psyche.localsvm``) through real sockets, with the project's own client
(``SolanaRpc``, ``TxSender``, ``account_updates``) and the real SBF programs: the coordinator
program runs, and a validator's rules hold (signatures, blockhash window, duplicates, fees, rent,
clock), with a validator's response and notification shapes."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import signal
import subprocess
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from solders.clock import Clock
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import (
    CreateAccountParams,
    TransferParams,
    create_account,
    transfer,
)
from solders.sysvar import CLOCK
from solders.transaction import Transaction
from websockets.asyncio.client import connect

from psyche.localsvm import LocalSvmThread
from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import (
    ProgramClient,
    RunAccounts,
    RunInstructions,
    instance_pda,
)
from psyche.solana.layout import CoordinatorLayout, fixed_str
from psyche.solana.programs.coordinator import metadata_arg
from psyche.solana.rpc import (
    ProgramRejectedError,
    RpcError,
    SolanaRpc,
    TxSender,
    account_updates,
)

ROOT = Path(__file__).resolve().parents[3]
IDL = ROOT / "idl" / "psyche_coordinator.json"
VENV_BIN = ROOT / ".venv" / "bin"
SOL = 10**9
U64_MAX = 2**64 - 1

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 30) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def program() -> ProgramClient:
    return ProgramClient(IdlCodec.load(IDL))


def funded(node: LocalSvmThread, lamports: int = 10 * SOL) -> Keypair:
    kp = Keypair()
    node.airdrop(kp.pubkey(), lamports)
    return kp


def raw_call(node: LocalSvmThread, method: str, params: list[Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = httpx.post(node.url, json=body, timeout=10).json()
    assert isinstance(reply, dict)
    return reply


def signed(payer: Keypair, ixs: list[Instruction], blockhash: Hash, *more: Keypair) -> Transaction:
    msg = Message.new_with_blockhash(ixs, payer.pubkey(), blockhash)
    return Transaction([payer, *more], msg, blockhash)


def latest(node: LocalSvmThread) -> Hash:
    reply = raw_call(node, "getLatestBlockhash", [{"commitment": "confirmed"}])
    return Hash.from_string(reply["result"]["value"]["blockhash"])


def send_raw(node: LocalSvmThread, tx: Transaction, **opts: Any) -> dict[str, Any]:
    data = base64.b64encode(bytes(tx)).decode()
    return raw_call(node, "sendTransaction", [data, {"encoding": "base64", **opts}])


def status(node: LocalSvmThread, sig: str) -> dict[str, Any] | None:
    reply = raw_call(node, "getSignatureStatuses", [[sig]])
    value: dict[str, Any] | None = reply["result"]["value"][0]
    return value


def balance(node: LocalSvmThread, key: Pubkey) -> int:
    return int(raw_call(node, "getBalance", [str(key)])["result"]["value"])


class Run:
    """A run created on the coordinator program with the project's client."""

    def __init__(self, node: LocalSvmThread, run_id: str) -> None:
        self.node = node
        self.program = program()
        self.layout = CoordinatorLayout(self.program.idl)
        self.authority = funded(node)
        self.account = Keypair()
        self.run_id = run_id
        accounts = RunAccounts(instance_pda(self.program.program_id, run_id), self.account.pubkey())
        self.ixs = RunInstructions(self.program, accounts)

    def sender(self, payer: Keypair | None = None) -> TxSender:
        rpc = SolanaRpc(self.node.url)
        return TxSender([rpc], payer or self.authority, error_names=self.program.idl.error_name)

    async def create(self) -> str:
        rpc = SolanaRpc(self.node.url)
        me = self.authority.pubkey()
        create = create_account(
            CreateAccountParams(
                from_pubkey=me,
                to_pubkey=self.account.pubkey(),
                lamports=await rpc.minimum_balance(self.layout.size),
                space=self.layout.size,
                owner=self.program.program_id,
            )
        )
        init = self.ixs.init_coordinator(me, me, me, self.run_id, "test")
        sig = await self.sender().send([create, init], [self.account], label="init")
        await rpc.close()
        return sig

    def update_metadata(self, name: str) -> Instruction:
        args = {"metadata": metadata_arg(name), "config": None, "model": None, "progress": None}
        return self.ixs.owner("update", self.authority.pubkey(), args)

    def decode(self, data: bytes) -> dict[str, Any]:
        raw: dict[str, Any] = self.program.idl.decode_account("CoordinatorAccount", data)
        return raw


def test_create_run_on_the_coordinator_and_read_it_back(local_svm: LocalSvmThread) -> None:
    r = Run(local_svm, "create-read")

    async def scenario() -> tuple[str, bytes | None]:
        sig = await r.create()
        rpc = SolanaRpc(local_svm.url)
        try:
            return sig, await rpc.get_account(r.account.pubkey())
        finally:
            await rpc.close()

    sig, data = run(scenario())
    assert data is not None and len(data) == r.layout.size
    raw = r.decode(data)
    assert raw["nonce"] == 0
    assert fixed_str(bytes(raw["state"]["coordinator"]["run_id"]["bytes"])) == "create-read"
    # The server's own view agrees, and the history has what a cost benchmark reads.
    acc = local_svm.get_account(r.account.pubkey())
    assert acc is not None and bytes(acc.data) == data
    assert acc.owner == r.program.program_id
    record = local_svm.transaction(sig)
    assert record is not None and record.err is None
    assert record.fee == 2 * 5000 and record.compute_units > 0
    assert any(f"Program {r.program.program_id} invoke [1]" in line for line in record.logs)
    tx = raw_call(local_svm, "getTransaction", [sig, {"encoding": "json"}])["result"]
    assert tx["meta"]["err"] is None and tx["meta"]["fee"] == 10_000
    assert tx["meta"]["computeUnitsConsumed"] == record.compute_units
    assert tx["meta"]["logMessages"] == list(record.logs)
    assert tx["transaction"]["signatures"][0] == sig
    instance = local_svm.get_account(r.ixs.run.instance)
    assert instance is not None
    spent = tx["meta"]["preBalances"][0] - tx["meta"]["postBalances"][0]
    assert spent == 10_000 + acc.lamports + instance.lamports  # fee + the two accounts' rent


def test_program_error_is_program_rejected_with_code_and_idl_name(
    local_svm: LocalSvmThread,
) -> None:
    r = Run(local_svm, "rejected")
    intruder = funded(local_svm)
    ix = r.ixs.owner("set_paused", intruder.pubkey(), {"paused": True})

    async def scenario() -> None:
        await r.create()
        await r.sender(intruder).send([ix], label="set_paused")

    before = balance(local_svm, intruder.pubkey())
    with pytest.raises(ProgramRejectedError) as e:
        run(scenario())
    assert e.value.code == 6027 and e.value.name == "NotMainAuthority"
    # Refused in preflight: never committed, no fee.
    assert balance(local_svm, intruder.pubkey()) == before


def test_preflight_failure_has_a_validators_error_shape(local_svm: LocalSvmThread) -> None:
    r = Run(local_svm, "preflight-shape")
    run(r.create())
    intruder = funded(local_svm)
    tx = signed(
        intruder,
        [r.ixs.owner("set_paused", intruder.pubkey(), {"paused": True})],
        latest(local_svm),
    )
    reply = send_raw(local_svm, tx)
    err = reply["error"]
    assert err["code"] == -32002
    assert err["message"] == (
        "Transaction simulation failed: Error processing Instruction 0: "
        "custom program error: 0x178b"
    )
    data = err["data"]
    assert data["err"] == {"InstructionError": [0, {"Custom": 6027}]}
    assert data["unitsConsumed"] > 0 and data["accounts"] is None
    assert (
        data["logs"][-1] == f"Program {r.program.program_id} failed: custom program error: 0x178b"
    )
    assert status(local_svm, str(tx.signatures[0])) is None


def test_skip_preflight_failure_is_committed_with_its_error_and_fee(
    local_svm: LocalSvmThread,
) -> None:
    r = Run(local_svm, "skip-preflight")
    run(r.create())
    intruder = funded(local_svm)
    tx = signed(
        intruder,
        [r.ixs.owner("set_paused", intruder.pubkey(), {"paused": True})],
        latest(local_svm),
    )
    before = balance(local_svm, intruder.pubkey())
    sig = send_raw(local_svm, tx, skipPreflight=True)["result"]
    assert sig == str(tx.signatures[0])
    st = status(local_svm, sig)
    assert st is not None
    assert st["err"] == {"InstructionError": [0, {"Custom": 6027}]}
    assert st["status"] == {"Err": st["err"]} and st["confirmationStatus"] == "confirmed"
    assert balance(local_svm, intruder.pubkey()) == before - 5000

    async def confirm() -> None:
        rpc = SolanaRpc(local_svm.url)
        try:
            await rpc.confirm(sig, 5)
        finally:
            await rpc.close()

    with pytest.raises(ProgramRejectedError) as e:
        run(confirm())
    assert e.value.code == 6027


def test_bad_signature_is_refused(local_svm: LocalSvmThread) -> None:
    payer, to = funded(local_svm), Keypair().pubkey()
    blockhash = latest(local_svm)
    msg = Message.new_with_blockhash(
        [transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=SOL))],
        payer.pubkey(),
        blockhash,
    )
    forged = Transaction.populate(msg, [Keypair().sign_message(bytes(msg))])
    reply = send_raw(local_svm, forged)
    # As agave 4.2's preflight answers it (tests/validator/test_rpc_differential.py).
    assert reply["error"]["code"] == -32002
    assert reply["error"]["message"] == (
        "Transaction simulation failed: Transaction did not pass signature verification"
    )
    data = reply["error"]["data"]
    assert data["err"] == "SignatureFailure" and data["fee"] is None
    assert data["preBalances"] is None and data["loadedAddresses"] is None

    async def through_client() -> None:
        rpc = SolanaRpc(local_svm.url)
        try:
            await rpc.send_transaction(forged)
        finally:
            await rpc.close()

    with pytest.raises(RpcError, match="did not pass signature verification"):
        run(through_client())
    # Without preflight the leader drops it: a signature back, never a status, no fee.
    before = balance(local_svm, payer.pubkey())
    assert send_raw(local_svm, forged, skipPreflight=True)["result"] == str(forged.signatures[0])
    assert status(local_svm, str(forged.signatures[0])) is None
    assert balance(local_svm, payer.pubkey()) == before and balance(local_svm, to) == 0


def test_stale_blockhash_is_refused() -> None:
    # A node of its own on a frozen clock: slots move only by the hook, so ages are exact.
    frozen = time.time()
    with LocalSvmThread(now=lambda: frozen) as local_svm:
        _stale_blockhash_is_refused(local_svm)


def _stale_blockhash_is_refused(local_svm: LocalSvmThread) -> None:
    payer = funded(local_svm)
    old = latest(local_svm)

    def pay(lamports: int) -> Transaction:
        ix = transfer(
            TransferParams(
                from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=lamports
            )
        )
        return signed(payer, [ix], old)

    local_svm.advance_slots(150)
    assert raw_call(local_svm, "isBlockhashValid", [str(old)])["result"]["value"] is True
    # Age 150 is still accepted by a leader (but too old for preflight, which keeps 6 slots to
    # forward the transaction).
    assert send_raw(local_svm, pay(SOL))["error"]["data"]["err"] == "BlockhashNotFound"
    late = pay(SOL + 1)
    assert send_raw(local_svm, late, skipPreflight=True)["result"]
    assert status(local_svm, str(late.signatures[0])) is not None
    local_svm.advance_slots(1)
    assert raw_call(local_svm, "isBlockhashValid", [str(old)])["result"]["value"] is False
    stale = pay(SOL + 2)
    err = send_raw(local_svm, stale)["error"]
    assert err["code"] == -32002
    assert err["message"] == "Transaction simulation failed: Blockhash not found"
    assert err["data"]["err"] == "BlockhashNotFound" and err["data"]["logs"] == []
    assert send_raw(local_svm, stale, skipPreflight=True)["result"]
    assert status(local_svm, str(stale.signatures[0])) is None

    async def through_client() -> None:
        rpc = SolanaRpc(local_svm.url)
        try:
            await rpc.send_transaction(stale)
        finally:
            await rpc.close()

    with pytest.raises(RpcError, match="Blockhash not found"):
        run(through_client())


def test_duplicate_transaction_is_refused(local_svm: LocalSvmThread) -> None:
    payer = funded(local_svm)
    to = Keypair().pubkey()
    ix = transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=SOL))
    tx = signed(payer, [ix], latest(local_svm))
    assert send_raw(local_svm, tx)["result"] == str(tx.signatures[0])
    after_first = balance(local_svm, payer.pubkey())
    err = send_raw(local_svm, tx)["error"]
    assert err["code"] == -32002 and err["data"]["err"] == "AlreadyProcessed"
    assert err["message"] == (
        "Transaction simulation failed: This transaction has already been processed"
    )
    assert send_raw(local_svm, tx, skipPreflight=True)["result"] == str(tx.signatures[0])
    assert balance(local_svm, payer.pubkey()) == after_first and balance(local_svm, to) == SOL


def test_fees_are_charged_per_signature(local_svm: LocalSvmThread) -> None:
    payer, other = funded(local_svm), funded(local_svm)
    to = Keypair().pubkey()
    one = signed(
        payer,
        [transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=SOL))],
        latest(local_svm),
    )
    before = balance(local_svm, payer.pubkey())
    assert "result" in send_raw(local_svm, one)
    assert balance(local_svm, payer.pubkey()) == before - SOL - 5000
    two = signed(
        payer,
        [transfer(TransferParams(from_pubkey=other.pubkey(), to_pubkey=to, lamports=SOL))],
        latest(local_svm),
        other,
    )
    message = base64.b64encode(bytes(two.message)).decode()
    fee = raw_call(local_svm, "getFeeForMessage", [message])["result"]["value"]
    assert fee == 10_000
    before, other_before = balance(local_svm, payer.pubkey()), balance(local_svm, other.pubkey())
    assert "result" in send_raw(local_svm, two)
    assert balance(local_svm, payer.pubkey()) == before - 10_000
    assert balance(local_svm, other.pubkey()) == other_before - SOL


def test_rent_exemption_is_enforced(local_svm: LocalSvmThread) -> None:
    payer = funded(local_svm)
    to = Keypair().pubkey()
    minimum = raw_call(local_svm, "getMinimumBalanceForRentExemption", [0])["result"]
    assert minimum == 890_880
    dust = signed(
        payer,
        [transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=minimum - 1))],
        latest(local_svm),
    )
    err = send_raw(local_svm, dust)["error"]
    assert err["data"]["err"] == {"InsufficientFundsForRent": {"account_index": 1}}
    assert err["message"] == (
        "Transaction simulation failed: Transaction results in an account (1) with insufficient "
        "funds for rent"
    )
    before = balance(local_svm, payer.pubkey())
    sig = send_raw(local_svm, dust, skipPreflight=True)["result"]
    st = status(local_svm, sig)
    assert st is not None and st["err"] == {"InsufficientFundsForRent": {"account_index": 1}}
    assert balance(local_svm, payer.pubkey()) == before - 5000 and balance(local_svm, to) == 0
    exact = signed(
        payer,
        [transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=minimum))],
        latest(local_svm),
    )
    assert "result" in send_raw(local_svm, exact)
    assert balance(local_svm, to) == minimum


def test_clock_sysvar_follows_wall_time() -> None:
    # A node of its own: the shared one's clock was moved ahead by other tests' hooks.
    with LocalSvmThread() as node:

        def clock() -> tuple[Clock, int]:
            res = raw_call(node, "getAccountInfo", [str(CLOCK), {"encoding": "base64"}])
            data = base64.b64decode(res["result"]["value"]["data"][0])
            return Clock.from_bytes(data), res["result"]["context"]["slot"]

        lo = math.floor(time.time())
        c, context_slot = clock()
        hi = math.floor(time.time())
        assert lo <= c.unix_timestamp <= hi and c.slot == context_slot
        epoch = raw_call(node, "getEpochInfo", [])["result"]
        assert epoch["epoch"] == c.epoch == 0 and epoch["absoluteSlot"] >= c.slot
        # One slot per 400 ms since the node started.
        started = c.unix_timestamp - c.slot * 0.4
        assert abs(started - time.time()) < 5
        # The chain clock moves with the slots: 25 s ahead is 62 slots and 25 s more.
        slot = node.advance_time(25)
        later, _ = clock()
        assert later.unix_timestamp >= c.unix_timestamp + 25
        assert later.slot >= c.slot + 62 and later.slot >= slot


def test_account_subscribe_notifies_after_a_transaction(local_svm: LocalSvmThread) -> None:
    r = Run(local_svm, "subscribed")
    run(r.create())

    async def scenario() -> bytes:
        connected = asyncio.Event()
        updates = account_updates(local_svm.ws_url, r.account.pubkey(), on_connect=connected.set)
        first = asyncio.ensure_future(anext(updates))
        try:
            await asyncio.wait_for(connected.wait(), 10)
            await r.sender().send([r.update_metadata("renamed")], label="update")
            return await asyncio.wait_for(first, 10)
        finally:
            first.cancel()
            await updates.aclose()

    data = run(scenario())
    raw = r.decode(data)
    assert raw["nonce"] == 1
    acc = local_svm.get_account(r.account.pubkey())
    assert acc is not None and bytes(acc.data) == data


def test_websocket_subscriptions_have_a_validators_shapes(local_svm: LocalSvmThread) -> None:
    wallet = Keypair().pubkey()

    async def request(ws: Any, id_: int, method: str, params: list[Any]) -> Any:
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}))
        reply = json.loads(await asyncio.wait_for(ws.recv(), 5))
        assert reply["id"] == id_
        return reply

    async def scenario() -> None:
        async with connect(local_svm.ws_url) as ws:
            sub = (await request(ws, 1, "accountSubscribe", [str(wallet), {"encoding": "base64"}]))[
                "result"
            ]
            sig = await asyncio.to_thread(local_svm.airdrop, wallet, 2 * SOL)
            note = json.loads(await asyncio.wait_for(ws.recv(), 5))
            slot = note["params"]["result"]["context"]["slot"]
            assert note == {
                "jsonrpc": "2.0",
                "method": "accountNotification",
                "params": {
                    "result": {
                        "context": {"slot": slot},
                        "value": {
                            "data": ["", "base64"],
                            "executable": False,
                            "lamports": 2 * SOL,
                            "owner": "11111111111111111111111111111111",
                            "rentEpoch": U64_MAX,
                            "space": 0,
                        },
                    },
                    "subscription": sub,
                },
            }
            record = local_svm.transaction(sig)
            assert record is not None and record.slot == slot
            assert (await request(ws, 2, "accountUnsubscribe", [sub]))["result"] is True
            again = await request(ws, 3, "accountUnsubscribe", [sub])
            assert again["error"] == {"code": -32602, "message": "Invalid subscription id."}
            # An already processed signature is notified at once, after the reply.
            sig_sub = (await request(ws, 4, "signatureSubscribe", [str(sig)]))["result"]
            note = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert note["method"] == "signatureNotification"
            assert note["params"] == {
                "result": {"context": {"slot": slot}, "value": {"err": None}},
                "subscription": sig_sub,
            }
            slot_sub = (await request(ws, 5, "slotSubscribe", []))["result"]
            note = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert note["method"] == "slotNotification"
            result = note["params"]["result"]
            assert note["params"]["subscription"] == slot_sub
            assert result["parent"] == result["slot"] - 1 and result["root"] <= result["slot"]
            assert (await request(ws, 6, "slotUnsubscribe", [slot_sub]))["result"] is True
            assert (await request(ws, 7, "getSlot", []))["error"]["code"] == -32601

    run(scenario())


def test_cli_entry_point_serves_get_health(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    ready = tmp_path / "ready.json"
    rich = Keypair().pubkey()
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "psyche-local-svm"),
            "run",
            "--rpc-port",
            "0",
            "--ready-file",
            str(ready),
            "--airdrop",
            f"{rich}={3 * SOL}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    reap_children.append(proc)
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no ready file in 30 s"
        time.sleep(0.05)
    urls = json.loads(ready.read_text())
    assert urls["rpc"].startswith("http://127.0.0.1:") and urls["ws"].startswith("ws://127.0.0.1:")
    rpc_port = int(urls["rpc"].rsplit(":", 1)[1])
    assert urls["ws"] == f"ws://127.0.0.1:{rpc_port + 1}"
    body = {"jsonrpc": "2.0", "id": 7, "method": "getHealth"}
    assert httpx.post(urls["rpc"], json=body).json() == {"jsonrpc": "2.0", "result": "ok", "id": 7}
    assert httpx.get(f"{urls['rpc']}/health").text == "ok"
    body = {"jsonrpc": "2.0", "id": 8, "method": "getBalance", "params": [str(rich)]}
    assert httpx.post(urls["rpc"], json=body).json()["result"]["value"] == 3 * SOL
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert f"RPC URL: {urls['rpc']}".encode() in out


def test_cli_without_the_programs_says_how_to_build_them(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            str(VENV_BIN / "psyche-local-svm"),
            "run",
            "--rpc-port",
            "0",
            "--deploy-dir",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=30,
    )
    assert res.returncode == 1
    assert b"scripts/build-sbf.sh" in res.stderr and b"psyche_coordinator.so" in res.stderr


def test_in_process_async_api() -> None:
    """``async with LocalSvm(...)`` on the caller's own loop (a launcher, an async test)."""
    from psyche.localsvm import LocalSvm, deploy_programs

    async def scenario() -> None:
        async with LocalSvm(deploy_programs(ROOT / "target" / "deploy")) as node:
            assert node.ws_url.endswith(f":{node.rpc_port + 1}")
            assert node.svm.get_account(program().program_id).executable
            wallet = Keypair()
            sig = node.airdrop(wallet.pubkey(), 2 * SOL)
            rpc = SolanaRpc(node.url)
            try:
                res = await rpc.call("getBalance", [str(wallet.pubkey())])
                assert res["value"] == 2 * SOL
                await rpc.confirm(str(sig), 5)
            finally:
                await rpc.close()
            record = node.transaction(sig)
            assert record is not None and record.fee == 5000 and record.ok
            assert [r.signature for r in node.history] == [sig]

    run(scenario())


def test_program_accounts_are_listed_with_a_validators_filters(local_svm: LocalSvmThread) -> None:
    """``getProgramAccounts`` over every key the chain committed: owner, ``dataSize`` and
    ``memcmp`` (base58 and base64) filters, ``withContext``, and a bad filter refused."""
    payer = funded(local_svm)
    owned = Keypair()
    space = 24
    rent = local_svm.call(lambda svm: svm.chain.minimum_balance(space))
    ix = create_account(
        CreateAccountParams(from_pubkey=payer.pubkey(), to_pubkey=owned.pubkey(),
                            lamports=rent, space=space, owner=Pubkey.from_string(
                                "BPFLoaderUpgradeab1e11111111111111111111111")))  # fmt: skip
    tx = signed(payer, [ix], latest(local_svm), owned)
    assert "result" in send_raw(local_svm, tx)
    wallets = raw_call(
        local_svm, "getProgramAccounts", ["11111111111111111111111111111111",
                                          {"encoding": "base64", "filters": [{"dataSize": 0}]}],
    )["result"]  # fmt: skip
    assert str(payer.pubkey()) in {a["pubkey"] for a in wallets}
    loader = "BPFLoaderUpgradeab1e11111111111111111111111"
    zeros = [{"memcmp": {"offset": 0, "bytes": "1111"}}, {"dataSize": space}]
    found = raw_call(local_svm, "getProgramAccounts", [loader, {"filters": zeros,
                     "encoding": "base64", "withContext": True}])["result"]  # fmt: skip
    assert set(found) == {"context", "value"}
    assert str(owned.pubkey()) in {a["pubkey"] for a in found["value"]}
    (mine,) = [a for a in found["value"] if a["pubkey"] == str(owned.pubkey())]
    assert mine["account"]["space"] == space and mine["account"]["owner"] == loader
    b64 = [{"memcmp": {"offset": 8, "bytes": base64.b64encode(b"\x01").decode(),
                       "encoding": "base64"}}]  # fmt: skip
    none = raw_call(local_svm, "getProgramAccounts", [loader, {"filters": b64}])["result"]
    assert str(owned.pubkey()) not in {a["pubkey"] for a in none}
    bad = raw_call(local_svm, "getProgramAccounts", [loader, {"filters": [{}]}])
    assert bad["error"]["code"] == -32602
