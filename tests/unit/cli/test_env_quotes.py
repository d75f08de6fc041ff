"""docker --env-file passes `RPC="http://…"` with its quotes: psyche-solana-client removes one pair
of matching surrounding quotes from every value it reads from the environment, once, on entry."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from solders.keypair import Keypair

from psyche.cli.solana import solana
from psyche.cli.solana_options import unquote, unquote_environ
from psyche.solana.programs import authorizer as authorization


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ('"http://a:1"', "http://a:1"),
        ("'http://a:1'", "http://a:1"),
        ("http://a:1", "http://a:1"),
        ('""', ""),
        ('"', '"'),
        ("'x\"", "'x\""),  # not a matching pair: kept as written
        ('"x"y"', 'x"y'),  # one pair only
        ("\"'x'\"", "'x'"),
        ("[1, 2]", "[1, 2]"),
    ],
)
def test_unquote(raw: str, value: str) -> None:
    assert unquote(raw) == value


def test_unquote_environ_touches_only_the_names_given() -> None:
    env = {"RPC": '"http://a"', "OTHER": '"kept"'}
    unquote_environ(["RPC", "ABSENT"], env)
    assert env == {"RPC": "http://a", "OTHER": '"kept"'}


def _seen_by_can_join(monkeypatch: pytest.MonkeyPatch, env: dict[str, str | None]) -> Any:
    seen: dict[str, Any] = {}

    async def can_join(session: Any, run_id: str, address: Any, grantee: Any) -> dict[str, Any]:
        seen.update(
            rpc=session.endpoints.rpc_urls,
            ws=session.endpoints.ws_urls,
            run_id=run_id,
            address=address,
            grantee=grantee,
        )
        return {"can_join": True, "authorization": "", "reasons": []}

    monkeypatch.setattr(authorization, "can_join", can_join)
    res = CliRunner().invoke(solana, ["check-authorization"], env=env)
    assert res.exit_code == 0, res.output
    return seen


def test_a_joiners_quoted_env_file_reaches_the_client_unquoted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wallet, authorizer = Keypair(), Keypair()
    env = {
        "RPC": '"http://127.0.0.1:8899"',
        "WS_RPC": "'ws://127.0.0.1:8900'",
        "RPC_2": '"https://api.devnet.solana.com"',
        "WS_RPC_2": '"wss://api.devnet.solana.com"',
        "RUN_ID": '"my-run"',
        "AUTHORIZER": f'"{authorizer.pubkey()}"',
        # solana-keygen's file, quoted as a .env line would quote it.
        "RAW_WALLET_PRIVATE_KEY": '"' + json.dumps(list(bytes(wallet))) + '"',
        "WALLET_PRIVATE_KEY_PATH": None,
        "ADDRESS": None,
    }
    seen = _seen_by_can_join(monkeypatch, env)
    assert seen["rpc"] == ["http://127.0.0.1:8899", "https://api.devnet.solana.com"]
    assert seen["ws"] == ["ws://127.0.0.1:8900", "wss://api.devnet.solana.com"]
    assert seen["run_id"] == "my-run"
    assert seen["grantee"] == authorizer.pubkey()
    assert seen["address"] == wallet.pubkey()  # no --pubkey: the key of RAW_WALLET_PRIVATE_KEY


def test_quoted_base58_wallet_and_empty_quoted_values(monkeypatch: pytest.MonkeyPatch) -> None:
    wallet = Keypair()
    env = {
        "RPC": "'http://127.0.0.1:8899'",
        "WS_RPC": '""',  # empty once unquoted: derived from RPC
        "RPC_2": '""',
        "WS_RPC_2": None,
        "RUN_ID": "r",
        "AUTHORIZER": '""',  # empty: permissionless
        "RAW_WALLET_PRIVATE_KEY": f"'{wallet}'",
        "ADDRESS": None,
    }
    seen = _seen_by_can_join(monkeypatch, env)
    assert seen["rpc"] == ["http://127.0.0.1:8899"] and seen["ws"] == ["ws://127.0.0.1:8900"]
    assert seen["grantee"] is None and seen["address"] == wallet.pubkey()


def test_train_flags_from_the_env_are_unquoted_too() -> None:
    # DATA_PARALLELISM is an int flag: quoted, it would not parse ('"0"' is not a valid integer);
    # unquoted it reaches the range check.
    env = {"RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(Keypair()))), "DATA_PARALLELISM": '"0"'}
    res = CliRunner().invoke(solana, ["train", "--run-id", "r"], env=env)
    assert res.exit_code == 2 and "'--data-parallelism'" in res.output
    assert "0 is not in the range x>=1" in res.output
