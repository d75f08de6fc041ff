"""scripts/join-authorization-{create,set-delegates}.sh under a POSIX sh (dash where installed):
the arguments they hand psyche-solana-client, their usage errors, and that the caller's Solana
environment does not leak into them. The client is a stub here (PSYCHE_SOLANA_CLIENT); the
scripts run against the real programs in tests/integration/solana/test_documented_commands.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "scripts"
SH = shutil.which("dash") or "sh"
GRANTEE = "GranteePubkey1111111111111111111111111111111"
GRANTOR = "GrantorPubkey1111111111111111111111111111111"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    stub = tmp_path / "client-stub"
    # One argument per line, then the environment variables the scripts must not pass on.
    stub.write_text(
        '#!/bin/sh\nfor a do echo "$a"; done\n'
        'echo "env:${RAW_WALLET_PRIVATE_KEY-}|${RPC_2-}|${WS_RPC-}|${AUTHORIZER-}"\n'
    )
    stub.chmod(0o755)
    for name in ("grantor.json", "grantee.json", "delegate1.json", "my delegate 2.json"):
        (tmp_path / name).write_text("[]")
    return tmp_path


def run(work: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PSYCHE_SOLANA_CLIENT": str(work / "client-stub"),
        # A joiner's environment, which must not reach the scripts' transactions.
        "RAW_WALLET_PRIVATE_KEY": "[1,2,3]",
        "RPC_2": "https://fallback.example",
        "WS_RPC": "wss://other.example",
        "AUTHORIZER": "SomeoneElse",
    }
    return subprocess.run(
        [SH, str(SCRIPTS / script), *args], cwd=work, env=env, capture_output=True, text=True
    )


CLEAN_ENV = "env:|||"


def test_create_with_a_grantee(work: Path) -> None:
    res = run(work, "join-authorization-create.sh", "devnet", "grantor.json", GRANTEE)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "join-authorization-create", "--rpc", "devnet",
        "--wallet-private-key-path", "grantor.json", "--authorizer", GRANTEE, CLEAN_ENV,
    ]  # fmt: skip


@pytest.mark.parametrize("grantee", [[], ["everyone"]])
def test_create_permissionless(work: Path, grantee: list[str]) -> None:
    res = run(work, "join-authorization-create.sh", "https://rpc.example", "grantor.json", *grantee)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "join-authorization-create", "--rpc", "https://rpc.example",
        "--wallet-private-key-path", "grantor.json", CLEAN_ENV,
    ]  # fmt: skip


def test_set_delegates(work: Path) -> None:
    res = run(
        work, "join-authorization-set-delegates.sh", "localnet", GRANTOR, "grantee.json",
        "delegate1.json", "my delegate 2.json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "join-authorization-delegate", "--rpc", "localnet",
        "--wallet-private-key-path", "grantee.json", "--join-authority", GRANTOR,
        "--delegates-clear",
        "--delegate-keypair", "delegate1.json", "--delegate-keypair", "my delegate 2.json",
        CLEAN_ENV,
    ]  # fmt: skip


def test_set_no_delegates_only_clears(work: Path) -> None:
    res = run(work, "join-authorization-set-delegates.sh", "devnet", GRANTOR, "grantee.json")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-2:] == ["--delegates-clear", CLEAN_ENV]


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("join-authorization-create.sh", ["devnet"], "usage: "),
        ("join-authorization-create.sh", ["devnet", "a.json", "b", "c"], "usage: "),
        ("join-authorization-create.sh", ["devnet", "missing.json"],
         "cannot read the grantor keypair file: missing.json"),
        ("join-authorization-set-delegates.sh", ["devnet", GRANTOR], "usage: "),
        ("join-authorization-set-delegates.sh", ["devnet", GRANTOR, "missing.json"],
         "cannot read the grantee keypair file: missing.json"),
    ],
)  # fmt: skip
def test_usage_errors(work: Path, script: str, args: list[str], message: str) -> None:
    res = run(work, script, *args)
    assert res.returncode == 2 and message in res.stderr and res.stdout == ""


@pytest.mark.parametrize(
    "script", ["join-authorization-create.sh", "join-authorization-set-delegates.sh"]
)
def test_no_bashisms(script: str) -> None:
    text = (SCRIPTS / script).read_text()
    assert text.startswith("#!/bin/sh\n")
    for bashism in ("[[", "pipefail", "BASH_SOURCE", "+=(", "local ", "function "):
        assert bashism not in text, bashism
    assert subprocess.run([SH, "-n", str(SCRIPTS / script)]).returncode == 0
