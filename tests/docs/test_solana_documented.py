"""The Solana commands of README "Solana (`psyche-solana-client`)", README "Rewards: the Treasurer
and the Mining Pool" and docs/rewards.md's two blocks, run verbatim in the fresh copy
(``tests/docs/catalog_solana.py`` lists them per scene), each scene against its own local SVM
running the four SBF programs from the copy's ``target/deploy``.

The environment is the user's, as the documents describe it: ``RPC``, ``WS_RPC``,
``WALLET_PRIVATE_KEY_PATH`` and the addresses the commands name (``GRANTEE_PUBKEY``, ``MINT``,
``USDC``, ``LENDER`` …), with keypair files (solana-keygen's JSON) in the copy's root. What a
user has before the documented lines is set up here without them: the wallets' SOL (the local
SVM's ``--airdrop``), the lenders' collateral token (a test mint, as ``create-test-mint`` makes
it) and, for the README's ``treasurer-claim-rewards``, the points a client earns by training:
three clients join and one epoch runs with the client's own instruction builders and the chain's
clock moved ahead (``tests/integration/solana/svm_epoch.py``; no model trains: a real training
epoch of ``config/tiny`` lasts minutes), so the claim pays real points (1000 each, × 7).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from solders.keypair import Keypair

from .catalog_solana import SOLANA_SCENES
from .shell import Shell

pytestmark = pytest.mark.slow

SOL = 10**9
SIGNATURE = r"^[1-9A-HJ-NP-Za-km-z]{64,90}$"
LENDERS = 4  # the authority's `withdraw 4000000` takes four lenders' `deposit 1000000`


@pytest.fixture(scope="module")
def copy(fresh_copy: Path) -> Path:
    """The copy after its setup (not documented commands of these sections): its .venv and the
    SBF programs (cached builds copied in)."""
    for script in ("scripts/setup.sh", "scripts/build-sbf.sh"):
        subprocess.run(["bash", script], cwd=fresh_copy, check=True, timeout=1200)
    return fresh_copy


def keypair(root: Path, name: str) -> Keypair:
    """``name`` in the copy's root, as ``solana-keygen new -o NAME`` writes it."""
    kp = Keypair()
    (root / name).write_text(json.dumps(list(bytes(kp))))
    return kp


JOIN_S = 300 if os.environ.get("PSYCHE_TEST_CHAIN") == "validator" else 120
"""How long the joiner may take to join. On a real validator, whose proof-of-history thread keeps
one of 2 cores busy, a joiner took 116 s before its first line (16 s beside the local SVM), when
every start still compiled the bytecode of transformers and torch's Python; scripts/setup.sh
compiles it once since 2026-12-06."""


@contextlib.contextmanager
def local_svm(root: Path, logs: Path, wallets: list[Keypair]) -> Iterator[tuple[str, str]]:
    """``psyche-local-svm run`` on free ports with ``wallets`` funded: (rpc, ws) URLs. With
    ``PSYCHE_TEST_CHAIN=validator`` (scripts/test-validator.sh), a real solana-test-validator
    instead, the wallets funded through its faucet."""
    logs.mkdir(parents=True, exist_ok=True)
    if os.environ.get("PSYCHE_TEST_CHAIN") == "validator":
        with real_validator(root, logs, wallets) as urls:
            yield urls
        return
    ready = logs / "svm-ready.json"
    argv = [str(root / ".venv" / "bin" / "psyche-local-svm"), "run", "--rpc-port", "0",
            "--ready-file", str(ready)]  # fmt: skip
    for kp in wallets:
        argv += ["--airdrop", f"{kp.pubkey()}={10 * SOL}"]
    with (logs / "svm.log").open("wb") as log:
        proc = subprocess.Popen(
            argv, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(FileNotFoundError, ValueError):
                urls = json.loads(ready.read_text())
                break
            assert proc.poll() is None, (logs / "svm.log").read_text()
            assert time.monotonic() < deadline, "the local SVM was not ready within 60 s"
            time.sleep(0.1)
        yield urls["rpc"], urls["ws"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def real_validator(root: Path, logs: Path, wallets: list[Keypair]) -> Iterator[tuple[str, str]]:
    from psyche.localsvm import deploy_programs
    from psyche.testnet.solana_chain import request_airdrop
    from psyche.testnet.validator import start_validator

    programs = {str(k): v for k, v in deploy_programs(root / "target" / "deploy").items()}
    with start_validator(logs / "validator", programs) as node:
        for kp in wallets:
            request_airdrop(node.url, str(kp.pubkey()), 10 * SOL)
        yield node.url, node.ws_url


def setup_cli(root: Path, rpc: str, wallet: str, *args: str) -> Any:
    """A ``psyche-solana-client`` call that sets up what the user has before the documented lines
    (not one of them); its JSON output."""
    res = subprocess.run(
        [str(root / ".venv" / "bin" / "psyche-solana-client"), *args, "--rpc", rpc,
         "--wallet-private-key-path", wallet],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return json.loads(res.stdout) if res.stdout.strip() else None


def last_json(out: str) -> Any:
    """The JSON document a command printed (after the ``$ command`` line of its log)."""
    return json.loads(out[out.index("\n") + 1 :])


def lenders_usdc(root: Path, rpc: str, lenders: list[Keypair]) -> str:
    """The lenders' collateral token (USDC in the documents), 1000000 base units each, issued by
    ``usdc-issuer.json`` (funded with the other wallets)."""
    holders = [a for kp in lenders for a in ("--mint-to", f"{kp.pubkey()}=1000000")]
    out = setup_cli(root, rpc, "usdc-issuer.json", "create-test-mint", "--decimals", "6", *holders)
    return str(out["mint"])


def run_creator_lines(shell: Shell, scene: list[str]) -> None:
    """The run creator's lines through the Treasurer (both documents), in their order."""
    mint_line, create, config, rates, top_up, resume = scene[:6]
    out = shell.run(mint_line, r'^\s*"mint": "\w+"')
    shell.env["MINT"] = last_json(out)["mint"]
    out = shell.run(create, r'^\s*"collateral_per_point": 7,')
    assert last_json(out)["run_id"] == "myrun"
    shell.run(config, r'^\s*"signatures": \[')
    shell.run(rates, SIGNATURE)
    out = shell.run(top_up, r'^\s*"escrow_balance_after": 500000000')
    shell.run(resume, SIGNATURE)


def pool_lines(shell: Shell, lines: list[str], lenders: list[str], authority: str) -> None:
    """The Mining Pool's lines: each lender's as every lender, the authority's as the pool
    authority (the run creator, who holds MINT)."""
    create, deposit, withdraw, freeze, earnings, claim = lines
    me = {"WALLET_PRIVATE_KEY_PATH": authority}
    shell.run(create, r'^\s*"max_deposit_collateral_amount": 5000000,', env=me)
    for wallet in lenders:
        shell.run(deposit, r'^\s*"deposited_collateral_amount": 1000000,',
                  env={"WALLET_PRIVATE_KEY_PATH": wallet})  # fmt: skip
    shell.run(withdraw, r'^\s*"total_extracted_collateral_amount": 4000000,', env=me)
    shell.run(freeze, r'^\s*"frozen": true', env=me)
    shell.run(earnings, r'^\s*"total_deposited_redeemable_amount": 14000,', env=me)
    for wallet in lenders:
        # 14000 × 1000000 / 4000000: a quarter each
        shell.run(claim, r'^\s*"claimed": 3500,', env={"WALLET_PRIVATE_KEY_PATH": wallet})


def check_lender(out: str) -> dict[str, Any]:
    """json-dump-user of a lender after the claims: its share paid, in its token account."""
    user: dict[str, Any] = last_json(out)
    (pool,) = user["pools"]
    assert pool["lender"]["claimed_redeemable_amount"] == 3500
    assert pool["lender"]["claimable_redeemable_amount"] == 0
    assert pool["balances"]["redeemable"]["amount"] == 3500
    assert pool["pool"]["unclaimed_redeemable_amount"] == 0
    return user


def test_solana_run_creator_and_joiner(copy: Path, shell_for: Any, tmp_path: Path) -> None:
    """README "Solana": the run creator's lines, then a delegate of the grantee checks and joins
    (``train`` until it has joined, then SIGTERM as ``docker stop`` sends it)."""
    scene = "solana run creator and joiner"
    create, config, auth, delegates, resume, check, train, dump = SOLANA_SCENES[scene]
    keys = {n: keypair(copy, f"{n}.json") for n in ("grantor", "grantee", "delegate1", "delegate2")}
    with local_svm(copy, tmp_path / "svm", list(keys.values())) as (rpc, ws):
        shell: Shell = shell_for(scene)
        shell.env.update(
            RPC=rpc, WS_RPC=ws, WALLET_PRIVATE_KEY_PATH="grantor.json",
            GRANTEE_PUBKEY=str(keys["grantee"].pubkey()),
            GRANTOR_PUBKEY=str(keys["grantor"].pubkey()),
            AUTHORIZER=str(keys["grantee"].pubkey()),
            PUBKEY=str(keys["delegate1"].pubkey()),
        )  # fmt: skip
        shell.run(create, r'^\s*"run_id": "myrun"')
        shell.run(config, r'^\s*"signatures": \[')
        shell.run(auth, r'^\s*"authorization": "\w+"')
        out = shell.run(delegates, SIGNATURE.replace("^", r'^\s*"').replace("$", '"$'))
        assert len(last_json(out)) == 1  # one transaction set both delegates
        shell.run(resume, SIGNATURE)
        shell.run(check, r'^\s*"can_join": true')
        # The joiner's environment (the env file the README names; its wallet is a delegate's).
        joiner = {"WALLET_PRIVATE_KEY_PATH": "delegate1.json", "RUN_ID": "myrun",
                  "RPC_2": rpc, "WS_RPC_2": ws}  # fmt: skip
        client, _ = shell.start(train, r"joined epoch 0 of the run", env=joiner, timeout=JOIN_S)
        out = shell.run(dump, r'^\s*"name": "My run"')
        run = last_json(out)
        assert run["coordinator"]["run_state"] == "WaitingForMembers"  # 1 of 3 clients so far
        client.stop(signal.SIGTERM, code=143, expect=r"terminated \(SIGTERM\); shut down cleanly")
        shell.ran_all()


def test_rewards_in_the_readme(copy: Path, shell_for: Any, tmp_path: Path) -> None:
    """README "Rewards": a Treasurer run, one epoch earned by three clients (set up, see the
    module's docstring), client1's claim, and a Mining Pool of four lenders."""
    from integration.solana import svm_epoch
    from psyche.localsvm import LocalSvmThread, deploy_programs

    scene = "rewards in the README"
    lines = SOLANA_SCENES[scene]
    creator = keypair(copy, "creator.json")
    clients = [keypair(copy, f"client{i}.json") for i in (1, 2, 3)]
    lenders = [keypair(copy, f"lender{i}.json") for i in range(1, LENDERS + 1)]
    issuer = keypair(copy, "usdc-issuer.json")
    with LocalSvmThread(deploy_programs(copy / "target" / "deploy")) as node:
        for kp in (creator, *clients, *lenders, issuer):
            node.airdrop(kp.pubkey(), 10 * SOL)
        usdc = lenders_usdc(copy, node.url, lenders)
        shell: Shell = shell_for(scene)
        shell.env.update(
            RPC=node.url, WS_RPC=node.ws_url, WALLET_PRIVATE_KEY_PATH="creator.json",
            CREATOR=str(creator.pubkey()), USDC=usdc, PUBKEY=str(lenders[0].pubkey()),
        )  # fmt: skip
        run_creator_lines(shell, lines)
        # The clients train an epoch (set up: a permissionless join authorization of the run's
        # join authority, the creator, then svm_epoch).
        setup_cli(copy, node.url, "creator.json", "join-authorization-create")
        asyncio.run(svm_epoch.join(node, "myrun", clients))
        asyncio.run(svm_epoch.run_epoch(node, "myrun", clients))
        out = shell.run(lines[6], r'^\s*"points_claimed": 1000,', env={
            "WALLET_PRIVATE_KEY_PATH": "client1.json"})  # fmt: skip
        paid = last_json(out)
        assert paid["amount_paid"] == 7000 and paid["balance_after"] == 7000
        assert paid["escrow_balance_after"] == 500000000 - 7000
        pool_lines(shell, lines[7:13], [f"lender{i}.json" for i in range(1, LENDERS + 1)],
                   "creator.json")  # fmt: skip
        out = shell.run(lines[13], r'^\s*"claimed_redeemable_amount": 3500,')
        user = check_lender(out)
        assert user["run"]["treasurer"]["treasurer"]["total_claimed_points"] == 1000
        shell.ran_all()


def test_rewards_in_docs_rewards_md(copy: Path, shell_for: Any, tmp_path: Path) -> None:
    """docs/rewards.md "Commands": the run creator's block, then the lenders' block."""
    scene = "rewards in docs/rewards.md"
    lines = SOLANA_SCENES[scene]
    creator = keypair(copy, "creator.json")
    lenders = [keypair(copy, f"lender{i}.json") for i in range(1, LENDERS + 1)]
    issuer = keypair(copy, "usdc-issuer.json")
    with local_svm(copy, tmp_path / "svm", [creator, *lenders, issuer]) as (rpc, ws):
        usdc = lenders_usdc(copy, rpc, lenders)
        shell: Shell = shell_for(scene)
        shell.env.update(
            RPC=rpc, WS_RPC=ws, WALLET_PRIVATE_KEY_PATH="creator.json",
            CREATOR=str(creator.pubkey()), USDC=usdc, LENDER=str(lenders[1].pubkey()),
        )  # fmt: skip
        run_creator_lines(shell, lines)
        pool_lines(shell, lines[6:12], [f"lender{i}.json" for i in range(1, LENDERS + 1)],
                   "creator.json")  # fmt: skip
        out = shell.run(lines[12], r'^\s*"claimed_redeemable_amount": 3500,')
        check_lender(out)
        shell.ran_all()
