"""psyche-solana-client: the command surface, env twins and argument checks (no chain needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from solders.keypair import Keypair

from psyche.cli.solana import solana
from psyche.solana.session import Endpoints, WalletError, load_wallet

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
    "treasurer-claim-rewards",
    "treasurer-top-up-rewards",
    "treasurer-wind-down",
    "treasurer-close-run",
    "create-test-mint",
    "mining-pool-create",
    "mining-pool-update",
    "mining-pool-deposit",
    "mining-pool-withdraw",
    "mining-pool-redeemable-deposit",
    "mining-pool-claim",
    "json-dump-user",
]
# Commands without endpoints: the P2P identity files, and the help printer (hidden).
LOCAL_COMMANDS = ["show-static-p2p-identity", "create-static-p2p-identity", "print-all-help"]


def test_every_command_exists_with_help() -> None:
    runner = CliRunner()
    assert sorted(solana.commands) == sorted(COMMANDS + LOCAL_COMMANDS)
    for name in COMMANDS:
        res = runner.invoke(solana, [name, "--help"])
        assert res.exit_code == 0, res.output
        assert "--rpc" in res.output and "--wallet-private-key-path" in res.output


def _train_flags(monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict) -> Any:
    """What ``train`` hands the daemon, without a chain: ``train_on_solana`` is replaced."""
    from psyche.cli import solana_client_process

    seen: dict[str, Any] = {}

    async def fake(session: Any, **kw: Any) -> int:
        seen.update(kw)
        return 0

    monkeypatch.setattr(solana_client_process, "train_on_solana", fake)
    res = CliRunner().invoke(solana, ["train", "--run-id", "r", *args], env=env)
    assert res.exit_code == 0, res.output
    return seen["training"]


@pytest.mark.parametrize("flag", ["--data-parallelism", "--tensor-parallelism"])
def test_parallelism_reaches_the_daemon(flag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(Keypair())))}
    flags = _train_flags(monkeypatch, [flag, "2"], env)
    assert getattr(flags, flag.removeprefix("--").replace("-", "_")) == 2


def test_env_twin_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(Keypair()))),
        "DATA_PARALLELISM": "4",
        "TENSOR_PARALLELISM": "2",
    }
    flags = _train_flags(monkeypatch, [], env)
    assert (flags.data_parallelism, flags.tensor_parallelism) == (4, 2)


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
