"""psyche-solana-client endpoints: cluster monikers and the websocket URL derived from an RPC URL,
as the Solana tools compute them (`solana config set --url devnet`)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from psyche.cli.solana import solana
from psyche.solana.programs import authorizer as authorization
from psyche.solana.session import Endpoints, resolve_rpc_url, websocket_url

PUBKEY = "11111111111111111111111111111112"


@pytest.mark.parametrize(
    ("moniker", "url"),
    [
        ("devnet", "https://api.devnet.solana.com"),
        ("mainnet-beta", "https://api.mainnet-beta.solana.com"),
        ("testnet", "https://api.testnet.solana.com"),
        ("localnet", "http://127.0.0.1:8899"),
        ("localhost", "http://127.0.0.1:8899"),
        ("https://rpc.example/abc?key=1", "https://rpc.example/abc?key=1"),
        ("http://10.0.0.2:9000", "http://10.0.0.2:9000"),
    ],
)
def test_rpc_monikers_and_urls(moniker: str, url: str) -> None:
    assert resolve_rpc_url(moniker) == url


@pytest.mark.parametrize("bad", ["dev", "api.devnet.solana.com", "ws://127.0.0.1:8900", "ftp://x"])
def test_anything_else_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match="neither an http\\(s\\) URL nor a cluster"):
        resolve_rpc_url(bad)


@pytest.mark.parametrize(
    ("rpc", "ws"),
    [
        ("https://api.devnet.solana.com", "wss://api.devnet.solana.com"),
        ("http://127.0.0.1:8899", "ws://127.0.0.1:8900"),
        ("https://rpc.example:443/k/abc", "wss://rpc.example:444/k/abc"),
        ("http://[::1]:8899", "ws://[::1]:8900"),
        ("https://rpc.example/path?api-key=1", "wss://rpc.example/path?api-key=1"),
    ],
)
def test_websocket_url_as_solana_tools_compute_it(rpc: str, ws: str) -> None:
    assert websocket_url(rpc) == ws
    assert Endpoints(rpc).ws_urls == [ws]


def _endpoints_of(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Endpoints, str]:
    """The endpoints `check-authorization` would talk to, without talking to them."""
    seen: dict[str, Any] = {}

    async def can_join(session: Any, *_: Any) -> dict[str, Any]:
        seen["endpoints"] = session.endpoints
        return {"can_join": True, "authorization": "", "reasons": []}

    monkeypatch.setattr(authorization, "can_join", can_join)
    res = CliRunner().invoke(
        solana,
        ["check-authorization", "--run-id", "r", "--pubkey", PUBKEY, *args],
        env=dict.fromkeys(("RPC", "WS_RPC", "RPC_2", "WS_RPC_2", "RPC_3", "WS_RPC_3")),
    )
    return seen.get("endpoints"), res.output  # type: ignore[return-value]


def test_cli_rpc_accepts_monikers(monkeypatch: pytest.MonkeyPatch) -> None:
    e, out = _endpoints_of(monkeypatch, "--rpc", "devnet", "--rpc-2", "localnet")
    assert e.rpc_urls == ["https://api.devnet.solana.com", "http://127.0.0.1:8899"], out
    assert e.ws_urls == ["wss://api.devnet.solana.com", "ws://127.0.0.1:8900"]


def test_cli_three_endpoint_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    e, out = _endpoints_of(
        monkeypatch, "-r", "devnet", "--rpc-2", "testnet", "--rpc-3", "http://10.0.0.3:8899"
    )
    assert e.rpc_urls == [
        "https://api.devnet.solana.com",
        "https://api.testnet.solana.com",
        "http://10.0.0.3:8899",
    ], out
    assert e.ws_urls[2] == "ws://10.0.0.3:8900"


def test_cli_ws_rpc_moniker_and_explicit_url(monkeypatch: pytest.MonkeyPatch) -> None:
    e, out = _endpoints_of(
        monkeypatch, "--rpc", "testnet", "--ws-rpc", "testnet", "--rpc-2", "devnet",
        "--ws-rpc-2", "wss://other.example/ws",
    )  # fmt: skip
    assert e.ws_urls == ["wss://api.testnet.solana.com", "wss://other.example/ws"], out


@pytest.mark.parametrize(
    ("flag", "value"), [("--rpc", "devnett"), ("--ws-rpc", "http://127.0.0.1:8900")]
)
def test_cli_bad_endpoint_is_a_usage_error(flag: str, value: str) -> None:
    res = CliRunner().invoke(
        solana, ["check-authorization", "--run-id", "r", "--pubkey", PUBKEY, flag, value]
    )
    assert res.exit_code == 2
    assert f"Invalid value for {flag}" in res.output and repr(value) in res.output
    assert "Traceback" not in res.output
