"""The chain a Solana end-to-end test runs on: the local SVM (``psyche.localsvm``) by default, or
agave's real ``solana-test-validator`` when ``PSYCHE_TEST_CHAIN=validator`` (what
``scripts/test-validator.sh`` sets, with the binary from ``scripts/validator.sh``). Both are
driven only through their JSON-RPC and websocket URLs, plus :meth:`get_account` for the test's
balance checks, which on the validator is an RPC call as a user's wallet would make it."""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import httpx
from solders.account import Account
from solders.pubkey import Pubkey

REAL = os.environ.get("PSYCHE_TEST_CHAIN", "local-svm") == "validator"
"""Whether this session's Solana tests run on a real validator."""


class Chain(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def ws_url(self) -> str: ...

    def get_account(self, pubkey: Pubkey) -> Account | None: ...


class RpcChain:
    """A chain known only by its URLs (the real validator)."""

    def __init__(self, url: str, ws_url: str) -> None:
        self._url, self._ws_url = url, ws_url

    @property
    def url(self) -> str:
        return self._url

    @property
    def ws_url(self) -> str:
        return self._ws_url

    def get_account(self, pubkey: Pubkey) -> Account | None:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "getAccountInfo",
            "params": [str(pubkey), {"encoding": "base64", "commitment": "confirmed"}],
        }
        value = httpx.post(self._url, json=body, timeout=10).json()["result"]["value"]
        if value is None:
            return None
        return Account(
            lamports=value["lamports"],
            data=base64.b64decode(value["data"][0]),
            owner=Pubkey.from_string(value["owner"]),
            executable=value["executable"],
            rent_epoch=int(value["rentEpoch"]),
        )


@contextlib.contextmanager
def solana_chain(workdir: Path) -> Iterator[Chain]:
    """The four SBF programs at their ids on this session's chain, until the block ends."""
    from psyche.localsvm import LocalSvmThread, deploy_programs

    programs = deploy_programs()
    if REAL:
        from psyche.testnet.validator import start_validator

        with start_validator(workdir, {str(k): v for k, v in programs.items()}) as node:
            yield RpcChain(node.url, node.ws_url)
    else:
        with LocalSvmThread(programs, rpc_port=0) as svm:
            yield svm


def chain_flags_for_testnet() -> list[str]:
    """``psyche-solana-local-testnet start`` flags that pick this session's chain."""
    return ["--validator", "real"] if REAL else []
