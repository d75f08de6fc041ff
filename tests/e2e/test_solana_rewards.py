"""End to end: rewards that pay out, on the Solana local testnet.

A local SVM (``LocalSvmThread``: the four SBF programs behind the RPC front), or with
``PSYCHE_TEST_CHAIN=validator`` a real ``solana-test-validator`` (``tests/e2e/chains.py``), holds
the chain;
``psyche-solana-local-testnet start --rpc … --treasurer`` creates the run *through the
Treasurer* with a test SPL mint (the run creator's commands: ``create-test-mint``, ``create-run
--treasurer-collateral-mint``, ``set-future-epoch-rates``, ``treasurer-top-up-rewards``) and 3
``psyche-solana-client train`` processes train it for 2 epochs. The chain outlives the launcher,
so the test then acts as the clients and lenders would, with the documented commands as
subprocesses:

1. every client claims with ``treasurer-claim-rewards``: its token balance equals the points the
   coordinator credited it (``json-dump-run``) × the Treasurer's rate, and a second claim is
   refused without paying anything;
2. a Mining Pool (``mining-pool-*``) funded by 3 lenders, whose authority is client 1: the
   authority withdraws the collateral (to buy compute), freezes the pool, deposits the reward
   tokens it claimed as the pool's redeemable token, and each lender claims exactly its floor
   share; the shares plus what rounding leaves in the pool add up to the deposit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.solana.programs.mining_pool import pool_pda, pool_redeemable_pda
from psyche.solana.tokens import associated_token_address, decode_token_account
from psyche.testnet.solana_chain import request_airdrop

from .chains import Chain, solana_chain
from .conftest import ROOT
from .explorer_browser import explorer_pool_page, have_chromium
from .test_solana_local_testnet import run_solana_testnet, solana_config

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
RATE = 7
"""Token base units per point."""
EARNING = 3_000
"""Points shared per epoch: 1000 for each of 3 Healthy clients."""
LENDER_DEPOSITS = (1_000_003, 2_500_000, 333_337)


def cli(svm: Chain, wallet: Path | None, *args: str, ok: bool = True) -> Any:
    """``psyche-solana-client ARGS`` against the SVM, signed by ``wallet``; its JSON output (or,
    with ``ok=False``, the completed process, which must have failed)."""
    env = {k: v for k, v in os.environ.items() if k not in {"RAW_WALLET_PRIVATE_KEY"}}
    env.update(RPC=svm.url, WS_RPC=svm.ws_url)
    if wallet is not None:
        env["WALLET_PRIVATE_KEY_PATH"] = str(wallet)
    res = subprocess.run(
        [str(BIN / "psyche-solana-client"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    if not ok:
        assert res.returncode != 0, res.stdout
        return res
    assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return json.loads(res.stdout) if res.stdout.strip().startswith(("{", "[")) else res.stdout


def balance(svm: Chain, owner: Pubkey, mint: Pubkey) -> int:
    account = svm.get_account(associated_token_address(owner, mint))
    return 0 if account is None else decode_token_account(bytes(account.data)).amount


def keypair(path: Path) -> Keypair:
    return Keypair.from_bytes(bytes(json.loads(path.read_text())))


def new_wallet(svm: Chain, path: Path) -> Keypair:
    kp = Keypair()
    path.write_text(json.dumps(list(bytes(kp))))
    request_airdrop(svm.url, str(kp.pubkey()), 10 * 10**9)
    return kp


def test_treasurer_pays_points_and_a_mining_pool_shares_them(
    tmp_path: Path, local_inputs: tuple[Path, Path]
) -> None:
    for name in (
        "psyche_coordinator",
        "psyche_authorizer",
        "psyche_treasurer",
        "psyche_mining_pool",
    ):
        if not (ROOT / "target" / "deploy" / f"{name}.so").is_file():
            pytest.fail(f"no SBF build of {name}: run scripts/build-sbf.sh")
    # Short epochs, so two of them (each ending in a successful Cooldown) fit in a few minutes.
    cfg = solana_config(
        tmp_path / "cfg", local_inputs, warmup_time=30, epoch_time=40, total_steps=200
    )
    out = tmp_path / "net"
    with solana_chain(tmp_path / "chain") as svm:
        rc, text = run_solana_testnet(
            cfg,
            out,
            tmp_path / "summary.json",
            "--epochs",
            "2",
            "--rpc",
            svm.url,
            "--ws-rpc",
            svm.ws_url,
            "--treasurer",
            "--earning-rate",
            str(EARNING),
            "--treasurer-collateral-per-point",
            str(RATE),
        )
        assert rc == 0, text[-4000:]
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["epochs_completed"] >= 2, summary["epochs"]
        assert "weights identical after every apply: True" in text
        info = json.loads((out / "treasurer.json").read_text())
        mint = Pubkey.from_string(info["mint"])
        run_id = "tiny-solana"

        # 1. Every client claims what the coordinator credited it, at the Treasurer's rate.
        dump = cli(svm, None, "json-dump-run", "--run-id", run_id)
        # json-dump-run shows identities as hex.
        earned = {bytes.fromhex(c["signer"]): c["earned"] for c in dump["clients"]}
        clients = [keypair(out / "keys" / f"delegate{i}.json") for i in (1, 2, 3)]
        paid = {}
        for i, kp in enumerate(clients, start=1):
            points = earned[bytes(kp.pubkey())]
            # Two successful epochs: each client was Healthy in at least one of them.
            assert points >= EARNING // 3, (i, earned)
            cli(
                svm,
                out / "keys" / f"delegate{i}.json",
                "treasurer-claim-rewards",
                "--run-id",
                run_id,
            )
            paid[i] = balance(svm, kp.pubkey(), mint)
            assert paid[i] == points * RATE, (i, points, paid[i])
            again = cli(
                svm,
                out / "keys" / f"delegate{i}.json",
                "treasurer-claim-rewards",
                "--run-id",
                run_id,
                ok=False,
            )
            assert "claim" in (again.stdout + again.stderr).lower(), again.stderr
            assert balance(svm, kp.pubkey(), mint) == paid[i]
        assert sum(earned[bytes(kp.pubkey())] for kp in clients) <= 2 * EARNING
        by_client = {i: earned[bytes(kp.pubkey())] for i, kp in enumerate(clients, start=1)}
        print(f"claimed: {paid} base units for points {by_client} at {RATE} per point")

        # 2. A Mining Pool: 3 lenders fund client 1, which shares its rewards back.
        authority = out / "keys" / "delegate1.json"
        lenders = [new_wallet(svm, tmp_path / f"lender{i}.json") for i in (1, 2, 3)]
        minted = cli(
            svm,
            out / "keys" / "creator.json",
            "create-test-mint",
            "--decimals",
            "6",
            *[
                a
                for kp, amount in zip(lenders, LENDER_DEPOSITS, strict=True)
                for a in ("--mint-to", f"{kp.pubkey()}={amount}")
            ],
        )
        collateral = minted["mint"]
        pool = ["--pool-index", "7"]
        cli(
            svm,
            authority,
            "mining-pool-create",
            *pool,
            "--collateral-mint",
            collateral,
            "--redeemable-mint",
            str(mint),
            "--max-deposit",
            str(sum(LENDER_DEPOSITS)),
        )
        for i, amount in enumerate(LENDER_DEPOSITS, start=1):
            cli(
                svm,
                tmp_path / f"lender{i}.json",
                "mining-pool-deposit",
                *pool,
                "--amount",
                str(amount),
            )
        cli(svm, tmp_path / "lender1.json", "mining-pool-deposit", *pool, "--amount", "1", ok=False)
        withdrawn = sum(LENDER_DEPOSITS) - 5
        cli(svm, authority, "mining-pool-withdraw", *pool, "--amount", str(withdrawn))
        assert balance(svm, clients[0].pubkey(), Pubkey.from_string(collateral)) == withdrawn
        cli(svm, authority, "mining-pool-update", *pool, "--freeze")
        rewards = paid[1]
        cli(svm, authority, "mining-pool-redeemable-deposit", *pool, "--amount", str(rewards))
        assert balance(svm, clients[0].pubkey(), mint) == 0
        total = sum(LENDER_DEPOSITS)
        shares = []
        for i, (kp, amount) in enumerate(zip(lenders, LENDER_DEPOSITS, strict=True), start=1):
            cli(svm, tmp_path / f"lender{i}.json", "mining-pool-claim", *pool)
            got = balance(svm, kp.pubkey(), mint)
            assert got == rewards * amount // total, (i, got)
            shares.append(got)
            cli(svm, tmp_path / f"lender{i}.json", "mining-pool-claim", *pool, ok=False)
        user = cli(svm, None, "json-dump-user", "--address", str(lenders[0].pubkey()), *pool)
        assert json.dumps(user).count(str(LENDER_DEPOSITS[0])) >= 1, user
        left = rewards - sum(shares)
        assert 0 <= left < len(lenders), (rewards, shares)
        # What rounding left is still in the pool: no token was lost or created.
        program = Pubkey.from_string(
            json.loads((ROOT / "idl" / "psyche_mining_pool.json").read_text())["address"]
        )
        vault = svm.get_account(pool_redeemable_pda(program, pool_pda(program, 7)))
        assert vault is not None and decode_token_account(bytes(vault.data)).amount == left
        print(f"pool: {rewards} reward base units shared as {shares}, {left} left by rounding")
        # The explorer's pool page shows these balances (tests/e2e/explorer_browser.py).
        if have_chromium():
            shown = explorer_pool_page(svm.url, svm.ws_url, run_id, 7, tmp_path / "explorer")
            as_text = lambda n: f"{n:,}"  # noqa: E731 - the page's toLocaleString (en-US)
            assert shown["cap"] == as_text(total) and shown["deposited"] == as_text(total), shown
            assert shown["extracted"] == as_text(withdrawn) and shown["frozen"] == "yes", shown
            assert shown["redeemable"] == as_text(rewards), shown
            assert sorted(shown["claims"].split("|")) == sorted(as_text(c) for c in shares), shown
            # The Treasurer Run's claimed points: what every client claimed in step 1.
            claimed = sum(paid.values()) // RATE
            assert shown["treasurer_claimed"] == as_text(claimed), (shown, paid)
