"""The run explorer as a person uses it, on the Solana local testnet (the SBF programs in the
local SVM): a real headless Chromium watches ``psyche-solana-local-testnet start --explorer PORT``
train one epoch — the runs list shows the run, the run page's phase changes while it watches, the
loss chart has one point per trained step of ``summary.json`` (witness metadata read from the
witness transactions) — then a Mining Pool goes through the rewards test's flow (3 lenders
deposit, the authority withdraws, freezes and deposits rewards, each lender claims) and an
explorer restarted on the testnet's database shows the pool's figures and each lender's claim."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from solders.keypair import Keypair

from psyche.localsvm import LocalSvmThread, deploy_programs

from .conftest import ROOT, free_port
from .explorer_browser import (
    Watched,
    assert_progress_agrees,
    chromium_or_skip,
    pool_page,
    wait_for_url,
    watch,
)
from .test_solana_local_testnet import run_solana_testnet, solana_config
from .test_solana_rewards import LENDER_DEPOSITS, cli, new_wallet

pytestmark = pytest.mark.slow

REWARDS = 123_457


def _pool_flow(svm: LocalSvmThread, out: Path, tmp: Path) -> list[int]:
    """The rewards test's Mining Pool flow with a reward mint of its own; each lender's claim."""
    authority = out / "keys" / "delegate1.json"
    lenders = [new_wallet(svm, tmp / f"lender{i}.json") for i in (1, 2, 3)]
    creator = out / "keys" / "creator.json"
    pairs = zip(lenders, LENDER_DEPOSITS, strict=True)
    mint_to = [a for kp, n in pairs for a in ("--mint-to", f"{kp.pubkey()}={n}")]
    collateral = cli(svm, creator, "create-test-mint", "--decimals", "6", *mint_to)["mint"]
    me = json.loads((out / "keys" / "delegate1.json").read_text())
    owner = Keypair.from_bytes(bytes(me)).pubkey()
    reward = cli(
        svm, creator, "create-test-mint", "--decimals", "6", "--mint-to", f"{owner}={REWARDS}"
    )["mint"]
    pool = ["--pool-index", "7"]
    total = sum(LENDER_DEPOSITS)
    cli(svm, authority, "mining-pool-create", *pool, "--collateral-mint", collateral,
        "--redeemable-mint", reward, "--max-deposit", str(total))  # fmt: skip
    for i, amount in enumerate(LENDER_DEPOSITS, start=1):
        cli(svm, tmp / f"lender{i}.json", "mining-pool-deposit", *pool, "--amount", str(amount))
    cli(svm, authority, "mining-pool-withdraw", *pool, "--amount", str(total - 5))
    cli(svm, authority, "mining-pool-update", *pool, "--freeze")
    cli(svm, authority, "mining-pool-redeemable-deposit", *pool, "--amount", str(REWARDS))
    for i in (1, 2, 3):
        cli(svm, tmp / f"lender{i}.json", "mining-pool-claim", *pool)
    return [REWARDS * amount // total for amount in LENDER_DEPOSITS]


def test_the_explorer_shows_a_solana_run_and_its_pool(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    chromium_or_skip()
    cfg = solana_config(tmp_path / "cfg", local_inputs, warmup_time=30, epoch_time=40)
    out, summary = tmp_path / "net", tmp_path / "summary.json"
    finished = threading.Event()
    seen: list[Watched] = []
    errors: list[BaseException] = []

    class Launcher:
        def poll(self) -> int | None:
            return 0 if finished.is_set() else None

    def watcher() -> None:
        try:
            url = wait_for_url(out, Launcher(), timeout=400)
            seen.append(watch(url, "tiny-solana", "solana", finished.is_set))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    with LocalSvmThread(deploy_programs(), rpc_port=0) as svm:
        thread = threading.Thread(target=watcher, daemon=True)
        thread.start()
        try:
            rc, text = run_solana_testnet(
                cfg, out, summary, "--rpc", svm.url, "--ws-rpc", svm.ws_url,
                "--explorer", str(free_port()),
            )  # fmt: skip
        finally:
            finished.set()
            thread.join(timeout=120)
        assert rc == 0, text[-4000:]
        assert not errors, errors
        assert "explorer: http://127.0.0.1:" in text
        (watched,) = seen
        assert len(watched.phases) >= 3, watched.phases
        trained = [r for r in json.loads(summary.read_text())["rounds"] if r["loss"]]
        assert trained and watched.loss_points == len(trained), (watched.loss_points, trained)
        # One epoch, ended by total_steps or by the epoch's timeout: either way drain rounds.
        finished = watched.phases[-1] == "Finished"
        assert_progress_agrees(watched, len(trained), total_steps=10, finished=finished)

        claims = _pool_flow(svm, out, tmp_path)
        # Restarted on the testnet's database: it resumes from the signatures it stored.
        port = free_port()
        cmd = [
            sys.executable, "-m", "psyche.cli.main", "explorer", "serve",
            "--database", str(out / "explorer.sqlite"), "--port", str(port),
            "--rpc", svm.url, "--ws-rpc", svm.ws_url, "--run-id", "tiny-solana", "--pool", "7",
            "--ready-file", str(tmp_path / "url.txt"),
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=ROOT)
        reap_children.append(proc)
        url = wait_for_url_file(tmp_path / "url.txt", proc)
        shown = pool_page(url, "solana")
        proc.terminate()
    total = sum(LENDER_DEPOSITS)
    as_text = lambda n: f"{n:,}"  # noqa: E731 - the page's toLocaleString (en-US)
    assert shown["cap"] == as_text(total) and shown["deposited"] == as_text(total), shown
    assert shown["extracted"] == as_text(total - 5), shown
    assert shown["redeemable"] == as_text(REWARDS) and shown["frozen"] == "yes", shown
    assert sorted(shown["claims"].split("|")) == sorted(as_text(c) for c in claims), shown


def wait_for_url_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        assert proc.poll() is None, "the explorer exited"
        time.sleep(0.2)
    raise AssertionError("the explorer never listened")
