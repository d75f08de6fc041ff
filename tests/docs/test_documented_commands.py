"""The README's and docs/'s commands, run verbatim from a fresh copy of the repository (issue 37).

The scenes run in the order the documentation reads, in one fresh copy (``fresh_copy``: what
git tracks, no ``.venv``, ``target/`` or ``runs/``), so a later scene finds what the reader's
earlier commands made (``bash scripts/run.sh`` installs ``.venv`` and makes ``runs/tiny``). Each
command is checked for its exit code and one line of its output; one that keeps running (a
server, a client) is checked for a line, then stopped as its user would stop it and checked for
the clean exit the README's Troubleshooting promises (143 on SIGTERM). No flag is added to any
command: each testnet here is already one epoch. What the catalog lists as needing what this
machine lacks is in ``catalog.CANNOT_RUN_HERE`` with its reason.

The default output folders (``runs/<run>-testnet`` under the folder the launcher starts in) are
checked here; relative ones by the e2e testnet tests, which run in their temporary folder with
every path relative.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from e2e.explorer_browser import BrowserWatch, check_run_watched

from .shell import Shell

pytestmark = pytest.mark.slow

ShellFor = Callable[[str], Shell]
DONE = r"^done: 1 epoch\(s\), \d+ rounds, .*weights identical after every apply: True"
CLEAN_STOP = "shut down cleanly"


def identical_weights(summary: Path) -> None:
    s = json.loads(summary.read_text())
    assert s["epochs_completed"] >= 1, s["epochs"]
    assert all(len(set(r["model_hash"].values())) <= 1 for r in s["rounds"]), s["rounds"]
    assert summary.with_suffix(".png").stat().st_size > 1000


def test_quick_start(shell_for: ShellFor, fresh_copy: Path) -> None:
    """README "Quick start": install and a centralized run, then the Solana one, whose programs
    the fresh copy lacks (built first, with a progress line). ``bash scripts/test.sh`` is CI."""
    sh = shell_for("quick start")
    out = sh.run("bash scripts/run.sh", DONE, timeout=420)
    assert "explorer: http://127.0.0.1:8080/" in out
    identical_weights(fresh_copy / "runs" / "tiny-testnet" / "summary.json")
    # docs/explorer.md: that run's explorer reopened from its database alone, which it must not
    # write (tests/e2e/test_explorer_history.py checks the page in Chromium).
    db = fresh_copy / "runs" / "tiny-testnet" / "explorer.sqlite"
    stored = db.read_bytes()
    history, _ = sh.start(
        "psyche explorer serve --database runs/tiny-testnet/explorer.sqlite",
        r"explorer at http://127\.0\.0\.1:8080/: the history in .*read-only",
        timeout=120,
    )
    history.stop(signal.SIGTERM, 0)
    assert db.read_bytes() == stored
    assert not (fresh_copy / "target" / "deploy").exists()
    out = sh.run("bash scripts/solana-testnet.sh", DONE, timeout=600)
    assert "[solana-testnet] building the SBF programs" in out
    assert "[build-sbf] done in" in out
    identical_weights(fresh_copy / "runs" / "tiny-solana-testnet" / "summary.json")
    sh.ran_all()


def test_pieces_by_hand(shell_for: ShellFor, fresh_copy: Path) -> None:
    """README "Running the pieces by hand": the server and two clients that join it (config/tiny
    needs three to start, so both wait in WaitingForMembers and are stopped), then the model,
    data and eval commands."""
    sh = shell_for("pieces by hand")
    cmds = iter(sh_texts("pieces by hand"))
    sh.run(next(cmds), r"data server")
    server, _ = sh.start(next(cmds), r"run 'tiny': listening on .*:20000")
    sh.run(next(cmds), None)
    assert (fresh_copy / "client1.key").stat().st_size == 32
    client1, _ = sh.start(next(cmds), r"joining run 'tiny' at 127\.0\.0\.1:20000", timeout=180)
    sh.run(next(cmds), r"^12D3Koo\w+$")
    sh.run(next(cmds), r"wrote runs/evals/alphabet/validation\.jsonl")
    client2, _ = sh.start(next(cmds), r"joining run 'tiny' at 127\.0\.0\.1:20000", timeout=180)
    client1.stop(signal.SIGTERM, 143, CLEAN_STOP)
    client2.stop(signal.SIGTERM, 143, CLEAN_STOP)
    assert (fresh_copy / "runs" / "client.log").stat().st_size > 0
    # A server's SIGTERM is its normal stop (exit 0, as the explorer's and the SVM's).
    server.stop(signal.SIGTERM, 0, r"shutting down")
    sh.run(next(cmds), r"wrote tiny Llama")
    sh.run(next(cmds), r"wrote \d+ documents")
    sh.run(next(cmds), r"\d+ samples of 64")
    serve, _ = sh.start(next(cmds), r"serving \d+ samples of 64 tokens")
    serve.stop(signal.SIGTERM, 0)
    sh.run(next(cmds), r"alphabet")
    sh.run(next(cmds), r"summary", timeout=420)
    sh.ran_all()


def test_solana_local_testnet(shell_for: ShellFor, fresh_copy: Path) -> None:
    """docs/explorer.md's Solana testnet with its explorer (README "Solana local testnet" is the
    quick start's ``bash scripts/solana-testnet.sh``, run there): the default output folder."""
    sh = shell_for("solana local testnet")
    cmds = iter(sh_texts("solana local testnet"))
    net = fresh_copy / "runs" / "tiny-solana-testnet"
    # The explorer's browser checks ride on the documented explorer run.
    with BrowserWatch(net, "tiny-solana", "solana") as browser:
        out = sh.run(next(cmds), DONE, timeout=420)
    assert "explorer: http://127.0.0.1:8081/" in out
    assert (net / "explorer.sqlite").is_file()
    summary = json.loads((net / "summary.json").read_text())
    assert any(r["end_reason"] == "opportunistic" for r in summary["rounds"]), summary["rounds"]
    assert re.search(r"epoch 0 step +\d+ round +\d+ +[\d.]+s \(opportunistic", out), out
    seen = browser.result()
    if seen is not None:
        check_run_watched(seen, summary, total_steps=10)
    program_calls_of_a_run(net, clients=3)
    sh.ran_all()


def program_calls_of_a_run(net: Path, clients: int) -> None:
    """Every instruction the clients sent ran in the coordinator's SBF program on the SVM: the
    launcher looked each confirmed transaction up (getTransaction) and read the programs' logs
    into ``program-calls.json``."""
    calls = json.loads((net / "program-calls.json").read_text())
    assert calls["not_found"] == 0 and calls["failed"] == 0, calls
    coordinator = calls["calls"]["psyche_coordinator"]
    assert coordinator["JoinRun"] == clients, calls
    for name in ("Tick", "Witness", "WarmupWitness"):
        assert coordinator.get(name, 0) >= 1, (name, calls)
    # Metered by the SBF VM: a real program execution reports the compute units it consumed.
    assert calls["compute_units"]["psyche_coordinator"]["Witness"] > 1000, calls
    # The run creator's documented flow ran through both programs.
    assert {"InitCoordinator", "Update", "SetPaused"} <= set(coordinator), calls
    # No client was handed another's address: each wrote its peer record and read the others'.
    for env in sorted((net / "env").glob("client-*.env")):
        assert "BOOTSTRAP_PEERS" not in env.read_text(), env
    assert coordinator.get("SetPeerAddrs", 0) >= clients, calls
    assert calls["calls"]["psyche_authorizer"] == {
        "AuthorizationCreate": 1,
        "AuthorizationGrantorUpdate": 1,
        "AuthorizationGranteeUpdate": 1,
    }, calls


def test_just_recipes(shell_for: ShellFor, fresh_copy: Path) -> None:
    """README "`just` recipes": the centralized testnet, then the localnet run with one client of
    its own and a joiner started by hand with the line the launcher printed; both stop by
    themselves when the run finishes. docs/explorer.md's cost command follows that run."""
    sh = shell_for("just recipes")
    cmds = iter(sh_texts("just recipes"))
    sh.run(next(cmds), r"Available recipes")
    sh.run(next(cmds), DONE, timeout=420)
    launcher, m = sh.start(
        next(cmds),
        r"joiner 1: RPC=http://127\.0\.0\.1:8899 WALLET_FILE=(\S+) AUTHORIZER=(\w+) just",
        timeout=180,
    )
    assert Path(m.group(1)).resolve() == (fresh_copy / "runs/try-testnet/keys/joiner1.json")
    joiner, _ = sh.start(next(cmds), r"joined epoch 0", env={"GRANTEE": m.group(2)}, timeout=180)
    sh.run(next(cmds), r'"calls_solana"', timeout=120)
    # The run needs both clients (init_min_clients = 2) and reaches its last step; the joiner
    # trains its rounds, sees the run finish and stops by itself, with no error on the way.
    out = launcher.finish(300, 0, DONE)
    assert re.search(r"epoch 0 step +3 ", out), out[-3000:]
    out = joiner.finish(120, 0, r"run 'try' finished")
    assert re.search(r"step 1 . loss", out) and re.search(r"step 2 . loss", out), out[-3000:]
    assert " ERROR " not in out and "Traceback" not in out, out[-3000:]
    sh.run(next(cmds), r"unchanged|formatted", timeout=120)
    sh.ran_all()


def test_explorer_and_local_svm(shell_for: ShellFor, fresh_copy: Path, tmp_path: Path) -> None:
    """docs/explorer.md by hand (a centralized server with ``--status-port 20002``, its database
    the default ``explorer.sqlite`` of the folder it starts in), docs/localsvm.md's four ways to
    start the SVM, and docs/docker.md's one command that needs no Docker daemon."""
    import subprocess

    sh = shell_for("explorer and local SVM")
    cmds = iter(sh_texts("explorer and local SVM"))
    server = subprocess.Popen(
        [str(fresh_copy / ".venv/bin/psyche-centralized-server"), "run", "--state",
         "config/tiny/state.toml", "--data-config", "config/tiny/data.toml", "--server-port",
         "0", "--status-port", "20002", "--tui", "false"],
        cwd=fresh_copy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        explorer, _ = sh.start(next(cmds), r"http://127\.0\.0\.1:8080", timeout=120)
        explorer.stop(signal.SIGTERM, 0)
        assert (fresh_copy / "explorer.sqlite").is_file()
    finally:
        server.terminate()
        server.wait(timeout=30)
    sh.run(next(cmds), r'"database_solana"', timeout=180)
    from solders.keypair import Keypair

    pubkey = str(Keypair().pubkey())
    ids = {
        "PUBKEY": pubkey,
        "PROGRAM_ID": "9jg3qZJhRk3LRFtgFPCKAm9ZnGcYqG2cLPny5681vyff",
    }
    for n in range(4):
        svm, _ = sh.start(next(cmds), r"RPC URL: http://127\.0\.0\.1:\d+", env=ids, timeout=120)
        svm.stop(signal.SIGTERM, 0)
        if n == 1:
            ready = json.loads(Path("/tmp/svm.json").read_text())
            assert ready["rpc"].startswith("http://127.0.0.1:")
    sh.run(next(cmds), None)
    assert (fresh_copy / ".env").read_text() == (fresh_copy / ".env.example").read_text()
    sh.ran_all()


def sh_texts(scene: str) -> list[str]:
    from .catalog import SCENES

    return list(SCENES[scene])
