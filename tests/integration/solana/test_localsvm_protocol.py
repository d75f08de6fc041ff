"""The local SVM's JSON-RPC and websocket fronts at the protocol level: every response parses
as the validator's own RPC types (solders' ``rpc.responses``, which mirror Agave's), malformed
input gets JSON-RPC errors, account encodings, simulation options, transaction versions."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
from typing import Any

import base58
import httpx
import pytest
import solders.rpc.responses as R
from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import Message, MessageV0
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import Transaction, VersionedTransaction
from websockets.asyncio.client import connect

from psyche.localsvm import LocalSvmThread

SOL = 10**9
COORDINATOR = "9jg3qZJhRk3LRFtgFPCKAm9ZnGcYqG2cLPny5681vyff"


def call(node: LocalSvmThread, method: str, params: list[Any] | None = None) -> str:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        body["params"] = params
    return httpx.post(node.url, json=body, timeout=10).text


def post(node: LocalSvmThread, content: bytes | str, **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.post(node.url, content=content, headers=headers, timeout=10)


def blockhash(node: LocalSvmThread) -> Hash:
    reply = json.loads(call(node, "getLatestBlockhash"))
    return Hash.from_string(reply["result"]["value"]["blockhash"])


def pay(node: LocalSvmThread, payer: Keypair, lamports: int = SOL) -> Transaction:
    ix = transfer(
        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=lamports)
    )
    bh = blockhash(node)
    return Transaction([payer], Message.new_with_blockhash([ix], payer.pubkey(), bh), bh)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_responses_parse_as_a_validators_rpc_types(local_svm: LocalSvmThread) -> None:
    payer = Keypair()
    airdrop = str(local_svm.airdrop(payer.pubkey(), 10 * SOL))
    tx = pay(local_svm, payer)
    missing = str(Keypair().pubkey())
    cases: list[tuple[Any, str, list[Any] | None]] = [
        (R.GetAccountInfoResp, "getAccountInfo", [str(payer.pubkey()), {"encoding": "base64"}]),
        (R.GetAccountInfoResp, "getAccountInfo", [str(payer.pubkey())]),
        (R.GetAccountInfoResp, "getAccountInfo", [missing, {"encoding": "base64"}]),
        (
            R.GetMultipleAccountsResp,
            "getMultipleAccounts",
            [[str(payer.pubkey()), missing], {"encoding": "base64+zstd"}],
        ),
        (R.GetBalanceResp, "getBalance", [str(payer.pubkey())]),
        (R.GetLatestBlockhashResp, "getLatestBlockhash", [{"commitment": "finalized"}]),
        (R.IsBlockhashValidResp, "isBlockhashValid", [str(blockhash(local_svm))]),
        (R.GetSignatureStatusesResp, "getSignatureStatuses", [[airdrop, str(tx.signatures[0])]]),
        (R.GetTransactionResp, "getTransaction", [airdrop, {"encoding": "json"}]),
        (R.GetTransactionResp, "getTransaction", [airdrop, "base64"]),
        (R.GetEpochInfoResp, "getEpochInfo", None),
        (R.GetEpochScheduleResp, "getEpochSchedule", []),
        (R.GetVersionResp, "getVersion", []),
        (R.GetHealthResp, "getHealth", []),
        (R.GetGenesisHashResp, "getGenesisHash", []),
        (R.GetSlotResp, "getSlot", [{"commitment": "processed"}]),
        (R.GetBlockHeightResp, "getBlockHeight", []),
        (R.GetTransactionCountResp, "getTransactionCount", []),
        (R.GetMinimumBalanceForRentExemptionResp, "getMinimumBalanceForRentExemption", [100]),
        (R.RequestAirdropResp, "requestAirdrop", [str(payer.pubkey()), SOL]),
        (R.GetFeeForMessageResp, "getFeeForMessage", [b64(bytes(tx.message))]),
        (
            R.SimulateTransactionResp,
            "simulateTransaction",
            [b64(bytes(tx)), {"encoding": "base64", "innerInstructions": True}],
        ),
        (R.SendTransactionResp, "sendTransaction", [b64(bytes(tx)), {"encoding": "base64"}]),
        # The error form: a preflight failure (a duplicate now).
        (R.SendTransactionResp, "sendTransaction", [b64(bytes(tx)), {"encoding": "base64"}]),
    ]
    for cls, method, params in cases:
        text = call(local_svm, method, params)
        parsed = cls.from_json(text)
        assert parsed is not None, (method, text)
    failure = R.SendTransactionResp.from_json(
        call(local_svm, "sendTransaction", [b64(bytes(tx)), {"encoding": "base64"}])
    )
    assert isinstance(failure, R.SendTransactionPreflightFailureMessage)
    assert failure.message.endswith("This transaction has already been processed")
    fees = json.loads(call(local_svm, "getRecentPrioritizationFees", [[COORDINATOR]]))
    assert fees["result"] == []


def test_malformed_requests_get_json_rpc_errors(local_svm: LocalSvmThread) -> None:
    def error(content: bytes | str) -> dict[str, Any]:
        reply = post(local_svm, content).json()
        assert isinstance(reply, dict) and "result" not in reply
        err: dict[str, Any] = reply["error"]
        return err

    assert error(b"{not json")["code"] == -32700
    assert error(b"\xff\xfe")["code"] == -32700
    assert error(b"[]")["code"] == -32600
    assert error(b"42")["code"] == -32600
    assert error(json.dumps({"id": 1, "method": "getSlot"}))["code"] == -32600
    assert error(json.dumps({"jsonrpc": "2.0", "id": 1, "method": 5}))["code"] == -32600
    assert error(json.dumps({"jsonrpc": "2.0", "id": [1], "method": "getSlot"}))["code"] == -32600
    assert error(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "nope"})) == {
        "code": -32601,
        "message": "Method not found",
    }
    bad: list[tuple[str, Any]] = [
        ("getAccountInfo", ["not a key"]),
        ("getAccountInfo", []),
        ("getAccountInfo", [COORDINATOR, {"encoding": "hex"}]),
        ("getAccountInfo", [COORDINATOR, {"commitment": "soon"}]),
        ("getAccountInfo", [COORDINATOR, {"dataSlice": {"offset": -1, "length": 2}}]),
        (
            "getAccountInfo",
            [COORDINATOR, {"encoding": "jsonParsed", "dataSlice": {"offset": 0, "length": 2}}],
        ),
        ("getAccountInfo", {"pubkey": COORDINATOR}),
        ("getBalance", [COORDINATOR, {}, "extra"]),
        ("getMultipleAccounts", [[COORDINATOR] * 101]),
        ("getSignatureStatuses", [["x"]]),
        ("getMinimumBalanceForRentExemption", ["100"]),
        ("getMinimumBalanceForRentExemption", [1.5]),
        ("sendTransaction", ["%%%"]),
        ("sendTransaction", [b64(b"\x01garbage"), {"encoding": "base64"}]),
        ("sendTransaction", ["A" * 5000, {"encoding": "base64"}]),
        ("sendTransaction", [b64(b"x"), {"encoding": "hex"}]),
        ("simulateTransaction", ["", {"sigVerify": True, "replaceRecentBlockhash": True}]),
        ("requestAirdrop", [COORDINATOR, -1]),
        ("isBlockhashValid", ["short"]),
        ("getFeeForMessage", ["!!"]),
        ("getTransaction", [str(Keypair().sign_message(b"x")), {"commitment": "processed"}]),
    ]
    for method, params in bad:
        err = error(json.dumps({"jsonrpc": "2.0", "id": 3, "method": method, "params": params}))
        assert err["code"] == -32602, (method, params, err)
    # A batch: one reply per request that has an id, in order; a notification gets none.
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "getHealth"},
        {"jsonrpc": "2.0", "method": "getHealth"},
        {"jsonrpc": "2.0", "id": "b", "method": "nope"},
        7,
    ]
    replies = post(local_svm, json.dumps(batch)).json()
    assert [r.get("id") for r in replies] == ["a", "b", None]
    assert replies[0]["result"] == "ok" and replies[1]["error"]["code"] == -32601
    assert replies[2]["error"]["code"] == -32600
    only_notification = post(local_svm, json.dumps({"jsonrpc": "2.0", "method": "getHealth"}))
    assert only_notification.status_code == 200 and only_notification.content == b""
    # minContextSlot beyond the current slot: the validator's -32016.
    err = error(
        json.dumps(
            {"jsonrpc": "2.0", "id": 4, "method": "getSlot", "params": [{"minContextSlot": 10**9}]}
        )
    )
    assert err["code"] == -32016 and "contextSlot" in err["data"]


def test_http_front_follows_the_validators_http_rules(local_svm: LocalSvmThread) -> None:
    huge = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "getHealth", "pad": "x" * 60_000})
    assert post(local_svm, huge).status_code == 413
    assert post(local_svm, "{}", **{"content-type": "text/plain"}).status_code == 415
    assert httpx.put(local_svm.url, content=b"{}").status_code == 405
    assert httpx.get(f"{local_svm.url}/health").text == "ok"
    # One persistent connection for many requests (the client's httpx pool relies on it).
    with httpx.Client() as client:
        for i in range(20):
            body = {"jsonrpc": "2.0", "id": i, "method": "getHealth"}
            assert client.post(local_svm.url, json=body).json()["id"] == i
    with httpx.Client(headers={"Expect": "100-continue"}) as client:
        reply = client.post(local_svm.url, json={"jsonrpc": "2.0", "id": 1, "method": "getSlot"})
        assert isinstance(reply.json()["result"], int)


def test_account_encodings(local_svm: LocalSvmThread) -> None:
    owner = Keypair()
    local_svm.airdrop(owner.pubkey(), SOL)
    key = str(owner.pubkey())

    def value(*cfg: Any) -> Any:
        reply = json.loads(call(local_svm, "getAccountInfo", [key, *cfg]))
        return reply["result"]["value"]

    # A system account: empty data in each encoding; the default is the legacy bare base58.
    assert value()["data"] == ""
    assert value({"encoding": "base58"})["data"] == ["", "base58"]
    assert value({"encoding": "base64"})["data"] == ["", "base64"]
    assert value({"encoding": "jsonParsed"})["data"] == ["", "base64"]
    # The coordinator program's ELF: sliced, and too large for base58 unsliced.
    slice_ = {"offset": 1, "length": 3}
    reply = json.loads(
        call(
            local_svm, "getAccountInfo", [COORDINATOR, {"encoding": "base58", "dataSlice": slice_}]
        )
    )
    assert reply["result"]["value"]["data"] == [base58.b58encode(b"ELF").decode(), "base58"]
    assert reply["result"]["value"]["executable"] is True
    reply = json.loads(call(local_svm, "getAccountInfo", [COORDINATOR, {"encoding": "base58"}]))
    assert reply["error"]["code"] == -32600 and "base 58" in reply["error"]["message"]
    full = json.loads(call(local_svm, "getAccountInfo", [COORDINATOR, {"encoding": "base64"}]))
    elf = base64.b64decode(full["result"]["value"]["data"][0])
    assert elf[:4] == b"\x7fELF" and len(elf) == full["result"]["value"]["space"]
    if shutil.which("zstd") is None:
        pytest.skip("no zstd binary to decode base64+zstd with")
    zst = json.loads(call(local_svm, "getAccountInfo", [COORDINATOR, {"encoding": "base64+zstd"}]))
    data, encoding = zst["result"]["value"]["data"]
    assert encoding == "base64+zstd"
    out = subprocess.run(
        ["zstd", "-dc"], input=base64.b64decode(data), capture_output=True, check=True
    )
    assert out.stdout == elf


def test_simulate_transaction_options(local_svm: LocalSvmThread) -> None:
    payer = Keypair()
    local_svm.airdrop(payer.pubkey(), 10 * SOL)
    tx = pay(local_svm, payer, SOL)
    to = tx.message.account_keys[1]
    raw = b64(bytes(tx))
    cfg = {"encoding": "base64", "accounts": {"addresses": [str(to)], "encoding": "base64"}}
    sim = json.loads(call(local_svm, "simulateTransaction", [raw, cfg]))["result"]["value"]
    assert sim["err"] is None and sim["unitsConsumed"] == 150
    assert sim["logs"] == [
        "Program 11111111111111111111111111111111 invoke [1]",
        "Program 11111111111111111111111111111111 success",
    ]
    assert sim["accounts"][0]["lamports"] == SOL
    assert json.loads(call(local_svm, "getBalance", [str(to)]))["result"]["value"] == 0
    # A forged signature simulates unless sigVerify is asked.
    forged = Transaction.populate(tx.message, [Keypair().sign_message(bytes(tx.message))])
    assert (
        json.loads(
            call(local_svm, "simulateTransaction", [b64(bytes(forged)), {"encoding": "base64"}])
        )["result"]["value"]["err"]
        is None
    )
    # With sigVerify the forgery is the simulation's err, as agave 4.2 answers it.
    value = json.loads(
        call(
            local_svm,
            "simulateTransaction",
            [b64(bytes(forged)), {"encoding": "base64", "sigVerify": True}],
        )
    )["result"]["value"]
    assert value["err"] == "SignatureFailure" and value["fee"] is None
    # An old blockhash: refused, unless replaced.
    local_svm.advance_slots(151)
    old = json.loads(call(local_svm, "simulateTransaction", [raw, {"encoding": "base64"}]))[
        "result"
    ]["value"]
    assert old["err"] == "BlockhashNotFound"
    new = json.loads(
        call(
            local_svm,
            "simulateTransaction",
            [raw, {"encoding": "base64", "replaceRecentBlockhash": True}],
        )
    )["result"]["value"]
    assert new["err"] is None
    replacement = new["replacementBlockhash"]
    valid = json.loads(call(local_svm, "isBlockhashValid", [replacement["blockhash"]]))
    assert valid["result"]["value"] is True
    # A slot may pass between the two calls.
    lag = valid["result"]["context"]["slot"] + 150 - replacement["lastValidBlockHeight"]
    assert 0 <= lag <= 5


def test_versioned_transactions(local_svm: LocalSvmThread) -> None:
    payer = Keypair()
    local_svm.airdrop(payer.pubkey(), 10 * SOL)
    to = Keypair().pubkey()
    ix = transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=SOL))
    msg = MessageV0.try_compile(payer.pubkey(), [ix], [], blockhash(local_svm))
    tx = VersionedTransaction(msg, [payer])
    sig = json.loads(call(local_svm, "sendTransaction", [base58.b58encode(bytes(tx)).decode()]))[
        "result"
    ]
    assert sig == str(tx.signatures[0])
    err = json.loads(call(local_svm, "getTransaction", [sig]))["error"]
    assert err["code"] == -32015
    got = json.loads(
        call(local_svm, "getTransaction", [sig, {"maxSupportedTransactionVersion": 0}])
    )["result"]
    assert got["version"] == 0 and got["meta"]["err"] is None
    assert got["transaction"]["message"]["addressTableLookups"] == []
    assert json.loads(call(local_svm, "getBalance", [str(to)]))["result"]["value"] == SOL


def test_websocket_front_rejects_malformed_messages(local_svm: LocalSvmThread) -> None:
    async def scenario() -> list[dict[str, Any]]:
        out = []
        async with connect(local_svm.ws_url) as ws:
            for message in [
                "{oops",
                json.dumps(
                    {"jsonrpc": "2.0", "id": 1, "method": "accountSubscribe", "params": ["bad"]}
                ),
                json.dumps(
                    {"jsonrpc": "2.0", "id": 2, "method": "slotUnsubscribe", "params": ["x"]}
                ),
                json.dumps({"jsonrpc": "2.0", "id": 3, "method": "logsSubscribe", "params": []}),
            ]:
                await ws.send(message)
                out.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
            # Still serving after all that.
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "slotSubscribe"}))
            out.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
        return out

    replies = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert [r.get("error", {}).get("code") for r in replies] == [
        -32700,
        -32602,
        -32602,
        -32601,
        None,
    ]
    assert isinstance(replies[-1]["result"], int)


def test_account_notifications_parse_as_a_validators_messages(local_svm: LocalSvmThread) -> None:
    wallet = Pubkey.from_string(str(Keypair().pubkey()))

    async def scenario() -> list[str]:
        texts = []
        async with connect(local_svm.ws_url) as ws:
            for i, encoding in enumerate(("base64", "base64+zstd", "base58")):
                params = [str(wallet), {"encoding": encoding, "commitment": "confirmed"}]
                await ws.send(
                    json.dumps(
                        {"jsonrpc": "2.0", "id": i, "method": "accountSubscribe", "params": params}
                    )
                )
                texts.append(str(await asyncio.wait_for(ws.recv(), 5)))
            await asyncio.to_thread(local_svm.airdrop, wallet, SOL)
            texts += [str(await asyncio.wait_for(ws.recv(), 5)) for _ in range(3)]
        return texts

    texts = asyncio.run(asyncio.wait_for(scenario(), 20))
    parsed = [R.parse_websocket_message(t)[0] for t in texts]
    assert [type(p).__name__ for p in parsed[:3]] == ["SubscriptionResult"] * 3
    notes = [p for p in parsed[3:] if isinstance(p, R.AccountNotification)]
    assert len(notes) == 3 and all(n.result.value.lamports == SOL for n in notes)
    assert sorted(json.loads(t)["params"]["result"]["value"]["data"][1] for t in texts[3:]) == [
        "base58",
        "base64",
        "base64+zstd",
    ]
