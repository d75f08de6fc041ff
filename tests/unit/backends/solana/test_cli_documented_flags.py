"""The flags and forms the user documentation writes, against the RPC test double with the real
IDLs: create-run --name/--description, update-config of a never-configured run and of the
documentation's sample config, set-paused's positional word, check-authorization --pubkey without
a wallet, and delegates given as keypair files. (Run as written, against the real programs:
tests/integration/solana/test_documented_commands.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.cli.solana import solana
from psyche.solana.instructions import JOIN_RUN_SCOPE, authorization_pda, instance_pda
from psyche.solana.layout import CoordinatorLayout

from ...solana.idl_support import (
    IDL_DIR,
    ROOT,
    VECTORS,
    authorizer_idl,
    coordinator_idl,
    needs_authorizer_idl,
    needs_coordinator_idl,
)
from .test_cli_e2e import Node, serve_run
from .test_cli_e2e import decoded as decoded_all

pytestmark = [needs_coordinator_idl, needs_authorizer_idl]


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node()
    yield n
    n.stop()


COMPUTE_BUDGET = Pubkey.from_string("ComputeBudget111111111111111111111111111111")


def decoded(tx: Any) -> list[tuple[Pubkey, str, dict[str, Any], list[tuple[Pubkey, bool, bool]]]]:
    """The transaction's instructions but the compute-budget ones the sender prepends."""
    return [ix for ix in decoded_all(tx) if ix[0] != COMPUTE_BUDGET]


def cli(node: Node, wallet: Keypair | None, *args: str) -> Any:
    env: dict[str, str | None] = {
        "RPC": node.double.url,
        "RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(wallet))) if wallet else None,
        "WALLET_PRIVATE_KEY_PATH": None,
        "PSYCHE_IDL_DIR": str(IDL_DIR),
        "AUTHORIZER": None,
        "RESUME": None,
        "ADDRESS": None,
    }
    return CliRunner().invoke(solana, list(args), env=env)


def ok(node: Node, wallet: Keypair | None, *args: str) -> str:
    res = cli(node, wallet, *args)
    assert res.exit_code == 0, res.output
    return str(res.stdout)


def fixed(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode()


def test_create_run_stores_name_and_description_in_the_same_transaction(node: Node) -> None:
    wallet = Keypair()
    out = json.loads(
        ok(node, wallet, "create-run", "--run-id", "r1", "--name", "Llama 20M",
           "--description", "A small test run — ünïcode")
    )  # fmt: skip
    (tx,) = node.double.transactions
    names = [n for _, n, _, _ in decoded(tx)]
    assert names == ["system", "init_coordinator", "update"]
    _, _, args, metas = decoded(tx)[2]
    meta = args["metadata"]
    assert fixed(meta["name"]["bytes"]) == "Llama 20M"
    assert fixed(meta["description"]["bytes"]) == "A small test run — ünïcode"
    assert args["config"] is None and args["model"] is None and args["progress"] is None
    assert (wallet.pubkey(), True, False) in metas or (wallet.pubkey(), True, True) in metas
    assert out["coordinator_account"] in {str(k) for k, _, _ in metas}


@pytest.mark.parametrize(("flag", "limit"), [("--name", 64), ("--description", 280)])
def test_create_run_refuses_metadata_that_does_not_fit(node: Node, flag: str, limit: int) -> None:
    res = cli(node, Keypair(), "create-run", "--run-id", "r1", flag, "é" * (limit // 2 + 1))
    assert res.exit_code == 2
    assert f"Invalid value for '{flag}'" in res.output and f"at most {limit}" in res.output
    assert node.double.transactions == []


def unconfigured_account() -> bytes:
    """A created-and-initialized run's account as the program leaves it (no model yet)."""
    size = CoordinatorLayout(coordinator_idl()).size
    doc = json.loads((VECTORS / "solana" / "accounts" / "01_initialized.json").read_text())
    data = bytearray(size)
    for offset, hexed in doc["bytes"]:
        raw = bytes.fromhex(hexed)
        data[offset : offset + len(raw)] = raw
    return bytes(data)


def serve_unconfigured_run(
    node: Node, wallet: Keypair, run_id: str, *, local_run: bool = True
) -> None:
    idl = coordinator_idl()
    account = Keypair().pubkey()
    inst = {
        "bump": 255,
        "main_authority": bytes(wallet.pubkey()),
        "join_authority": bytes(wallet.pubkey()),
        "coordinator_account": bytes(account),
        "run_id": run_id,
        "local_run": local_run,
    }
    program = Pubkey.from_string(idl.address)
    node.call(
        node.double.set_account(
            instance_pda(program, run_id), idl.encode_account("CoordinatorInstance", inst)
        )
    )
    node.call(node.double.set_account(account, unconfigured_account()))


def test_update_config_of_a_never_configured_run_with_the_documented_sample(node: Node) -> None:
    wallet = Keypair()
    serve_unconfigured_run(node, wallet, "scenario")
    sample = ROOT / "config" / "seed-sample" / "config.toml"
    res = cli(
        node, wallet, "update-config", "--run-id", "scenario", "--config-path", str(sample),
        "--name", "seed sample",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "rounds_per_epoch = 20 became config.epoch_time = 588" in res.stderr
    assert "cold_start_warmup_steps is absent: using 0" in res.stderr
    (tx,) = node.double.transactions
    ((_, name, args, _),) = decoded(tx)
    assert name == "update"
    assert args["config"]["epoch_time"] == 588
    assert args["model"]["LLM"]["cold_start_warmup_steps"] == 0
    # The metadata merge read the stored (empty) metadata without decoding the missing model.
    assert fixed(args["metadata"]["name"]["bytes"]) == "seed sample"
    assert fixed(args["metadata"]["description"]["bytes"]) == ""


@pytest.mark.parametrize(
    ("words", "env_resume", "paused"),
    [
        (["resume"], None, False),
        (["pause"], None, True),
        ([], None, True),
        (["--resume"], None, False),
        (["pause"], "true", True),  # the word on the command line beats RESUME
        (["resume", "--resume"], None, False),
    ],
)
def test_set_paused_positional_word(
    node: Node, words: list[str], env_resume: str | None, paused: bool
) -> None:
    wallet = Keypair()
    serve_run(node, wallet)
    env = {"RPC": node.double.url, "RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(wallet)))}
    env |= {"PSYCHE_IDL_DIR": str(IDL_DIR), "RESUME": env_resume}  # type: ignore[dict-item]
    res = CliRunner().invoke(solana, ["set-paused", "--run-id", "r1", *words], env=env)
    assert res.exit_code == 0, res.output
    (tx,) = node.double.transactions
    assert decoded(tx)[0][1:3] == ("set_paused", {"paused": paused})


def test_set_paused_contradiction_and_unknown_word(node: Node) -> None:
    res = cli(node, Keypair(), "set-paused", "--run-id", "r1", "pause", "--resume")
    assert res.exit_code == 2 and "contradict" in res.output
    res = cli(node, Keypair(), "set-paused", "--run-id", "r1", "unpause")
    assert res.exit_code == 2 and "'unpause' is not one of 'pause', 'resume'" in res.output
    assert node.double.transactions == []


def serve_authorization(
    node: Node, grantor: Pubkey, grantee: Pubkey, delegates: list[Pubkey]
) -> None:
    idl = authorizer_idl()
    pda = authorization_pda(Pubkey.from_string(idl.address), grantor, grantee, JOIN_RUN_SCOPE)
    value = {
        "bump": 255,
        "grantor": bytes(grantor),
        "grantee": bytes(grantee),
        "scope": JOIN_RUN_SCOPE,
        "active": True,
        "delegates": [bytes(d) for d in delegates],
        "grantor_update_unix_timestamp": 1,
    }
    node.call(node.double.set_account(pda, idl.encode_account("Authorization", value)))


def test_check_authorization_with_pubkey_needs_no_wallet(node: Node) -> None:
    owner, grantee, delegate, stranger = Keypair(), Keypair(), Keypair(), Keypair()
    serve_run(node, owner)  # join authority: owner
    serve_authorization(node, owner.pubkey(), grantee.pubkey(), [delegate.pubkey()])
    base = ["check-authorization", "--run-id", "r1", "--authorizer", str(grantee.pubkey())]
    for who in (delegate, grantee):
        out = json.loads(ok(node, None, *base, "--pubkey", str(who.pubkey())))
        assert out["can_join"] is True and out["reasons"] == []
    # --address is the older name of --pubkey.
    assert json.loads(ok(node, None, *base, "--address", str(delegate.pubkey())))["can_join"]
    res = cli(node, None, *base, "--pubkey", str(stranger.pubkey()))
    assert res.exit_code == 1
    assert json.loads(res.stdout)["can_join"] is False
    assert res.stderr.startswith(f"error: {stranger.pubkey()} may not join run 'r1' through ")
    assert "is neither the grantee nor one of its delegates" in res.stderr
    # Without --pubkey: the wallet's key (RAW_WALLET_PRIVATE_KEY).
    assert json.loads(ok(node, delegate, *base))["can_join"] is True
    assert cli(node, stranger, *base).exit_code == 1
    res = cli(node, None, *base)
    assert res.exit_code == 2 and "pass --pubkey" in res.output


def test_json_dump_run_needs_no_wallet(node: Node) -> None:
    serve_run(node, Keypair())
    assert json.loads(ok(node, None, "json-dump-run", "--run-id", "r1"))["nonce"] == 3


def keypair_files(tmp_path: Path, n: int) -> tuple[list[Keypair], list[str]]:
    keys = [Keypair() for _ in range(n)]
    paths = []
    for i, k in enumerate(keys):
        p = tmp_path / f"delegate{i}.json"
        p.write_text(json.dumps(list(bytes(k))))
        paths.append(str(p))
    return keys, paths


def test_delegates_from_keypair_files_in_transactions_that_fit(node: Node, tmp_path: Path) -> None:
    grantee, grantor = Keypair(), Keypair().pubkey()
    keys, paths = keypair_files(tmp_path, 30)
    args = ["join-authorization-delegate", "--join-authority", str(grantor), "--delegates-clear"]
    for p in paths:
        args += ["--delegate-keypair", p]
    out = json.loads(ok(node, grantee, *args))
    assert len(out) == 2
    first, second = (decoded(tx)[0] for tx in node.double.transactions)
    assert first[1] == second[1] == "authorization_grantee_update"
    assert first[2]["params"]["delegates_clear"] is True
    assert second[2]["params"]["delegates_clear"] is False
    added = first[2]["params"]["delegates_added"] + second[2]["params"]["delegates_added"]
    assert added == [bytes(k.pubkey()) for k in keys]


def test_delegate_keypair_errors(node: Node, tmp_path: Path) -> None:
    grantor = str(Keypair().pubkey())
    base = ["join-authorization-delegate", "--join-authority", grantor]
    res = cli(node, Keypair(), *base, "--delegate-keypair", str(tmp_path / "missing.json"))
    assert res.exit_code == 2 and "missing.json: cannot read the keypair" in res.output
    _, paths = keypair_files(tmp_path, 65)
    args = [a for p in paths for a in ("--delegate-keypair", p)]
    res = cli(node, Keypair(), *base, *args)
    assert res.exit_code == 1 and "at most 64" in res.output
    assert node.double.transactions == []


def test_json_dump_run_of_a_never_configured_run(node: Node) -> None:
    serve_unconfigured_run(node, Keypair(), "scenario")
    out = json.loads(ok(node, None, "json-dump-run", "--run-id", "scenario"))
    assert out["run_id"] == "scenario" and out["run_state"] == "Uninitialized"
    assert out["coordinator"] is None and "update-config" in out["note"]
    assert out["metadata"] == {"name": "", "description": "", "num_parameters": 0, "vocab_size": 0}


def test_check_authorization_without_an_authorization_names_who_did_not_authorize(
    node: Node,
) -> None:
    owner, grantee, who = Keypair(), Keypair(), Keypair()
    serve_run(node, owner)
    res = cli(
        node, None, "check-authorization", "--run-id", "r1", "--authorizer",
        str(grantee.pubkey()), "--pubkey", str(who.pubkey()),
    )  # fmt: skip
    assert res.exit_code == 1
    assert (
        f"the run's join authority {owner.pubkey()} has not authorized {grantee.pubkey()} "
        "(no authorization account at "
    ) in res.stderr
