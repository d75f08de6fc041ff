"""psyche-solana-client: the command surface, env twins and argument checks (no chain needed)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from solders.keypair import Keypair

from psyche.backends.solana.session import Endpoints, WalletError, load_wallet
from psyche.cli.solana import solana

COMMANDS = [
    "create-run",
    "update-config",
    "set-paused",
    "set-future-epoch-rates",
    "tick",
    "checkpoint",
    "close-run",
    "json-dump-run",
    "can-join",
    "check-authorization",
    "join-authorization-create",
    "join-authorization-delegate",
    "join-authorization-read",
    "join-authorization-delete",
    "train",
]


def test_every_command_exists_with_help() -> None:
    runner = CliRunner()
    assert sorted(solana.commands) == sorted(COMMANDS)
    for name in COMMANDS:
        res = runner.invoke(solana, [name, "--help"])
        assert res.exit_code == 0, res.output
        assert "--rpc" in res.output and "--wallet-private-key-path" in res.output


@pytest.mark.parametrize("flag", ["--data-parallelism", "--tensor-parallelism"])
def test_parallelism_above_one_is_refused(flag: str, tmp_path: object) -> None:
    runner = CliRunner()
    env = {"RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(Keypair())))}
    res = runner.invoke(solana, ["train", "--run-id", "r", flag, "2"], env=env)
    assert res.exit_code == 2
    assert "only 1 is supported" in res.output


def test_env_twin_is_read() -> None:
    runner = CliRunner()
    env = {"RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(Keypair()))), "DATA_PARALLELISM": "4"}
    res = runner.invoke(solana, ["train", "--run-id", "r"], env=env)
    assert res.exit_code == 2 and "only 1 is supported" in res.output


def test_missing_wallet_is_a_usage_error() -> None:
    res = CliRunner().invoke(solana, ["tick", "--run-id", "r"], env={"RAW_WALLET_PRIVATE_KEY": ""})
    assert res.exit_code == 2 and "no wallet" in res.output


def test_wallet_forms(tmp_path) -> None:  # type: ignore[no-untyped-def]
    kp = Keypair()
    path = tmp_path / "id.json"
    path.write_text(json.dumps(list(bytes(kp))))
    assert load_wallet(str(path), None).pubkey() == kp.pubkey()
    assert load_wallet(None, str(kp)).pubkey() == kp.pubkey()  # base58
    assert load_wallet(str(path), json.dumps(list(bytes(kp)))).pubkey() == kp.pubkey()
    with pytest.raises(WalletError):
        load_wallet(None, "not a key")


def test_websocket_urls_default_from_rpc() -> None:
    e = Endpoints("https://a.example", None, "http://b.example:8899", "ws://b.example:8900")
    assert e.rpc_urls == ["https://a.example", "http://b.example:8899"]
    assert e.ws_urls == ["wss://a.example", "ws://b.example:8900"]
