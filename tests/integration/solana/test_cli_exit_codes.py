"""What a joiner and a run creator see when their configuration is wrong, against the real
programs in the local SVM (issue 28, items 1 and 2): one line saying what to change, the
documented exit code, and no restart by the image's entry point (docker/entrypoint.sh, run here
as the container runs it, with the real client as its command).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from solders.keypair import Keypair

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
TINY = ROOT / "config" / "tiny" / "state.toml"
RUN_ID = "exit-codes"
LAMPORTS = 100 * 10**9
DROP = ("RAW_", "WALLET_", "RUN_ID", "RPC", "WS_RPC", "AUTHORIZER", "PSYCHE_", "BIND_P2P")

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROP)}
    return {**env, "COLUMNS": "200", **extra}


def _wallet(kp: Keypair) -> str:
    return json.dumps(list(bytes(kp)))


def _cli(
    args: list[str], wallet: Keypair, node: Any, cwd: Path
) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [str(BIN / "psyche-solana-client"), *args, "--rpc", node.url, "--ws-rpc", node.ws_url],
        env=_env(RAW_WALLET_PRIVATE_KEY=_wallet(wallet)),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert "Traceback" not in res.stderr, res.stderr
    return res


def _errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if "error" in line.lower()]


class Run:
    """One run on the module's chain: created, configured with config/tiny (3 clients needed,
    so it waits for members), resumed."""

    def __init__(self, node: Any, work: Path) -> None:
        self.node, self.work = node, work
        self.owner = Keypair()
        node.airdrop(self.owner.pubkey(), LAMPORTS)
        for step in (
            ["create-run", "--run-id", RUN_ID],
            ["update-config", "--run-id", RUN_ID, "--config-path", str(TINY)],
            ["set-paused", "--run-id", RUN_ID, "resume"],
        ):
            res = self.owner_cli(step)
            assert res.returncode == 0, res.stderr

    def owner_cli(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return _cli(args, self.owner, self.node, self.work)

    def joiner(self) -> Keypair:
        kp = Keypair()
        self.node.airdrop(kp.pubkey(), LAMPORTS)
        return kp

    def container(
        self, wallet: Keypair, run_id: str = RUN_ID, **extra: str
    ) -> subprocess.Popen[str]:
        """The image's entry point with the real client, configured as a joiner's .env would."""
        env = _env(
            PSYCHE_CLIENT_CMD=f"{BIN / 'psyche-solana-client'} train",
            RPC=self.node.url,
            WS_RPC=self.node.ws_url,
            RUN_ID=run_id,
            RAW_WALLET_PRIVATE_KEY=_wallet(wallet),
            PSYCHE_DEVICE="cpu",
            BIND_P2P_HOST="127.0.0.1",
            PSYCHE_RESTART_BACKOFF_S="0.1",
            LOGS="console",
            **extra,
        )
        return subprocess.Popen(
            ["bash", str(ENTRYPOINT)],
            env=env,
            cwd=self.work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


@pytest.fixture(scope="module")
def run(local_svm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    yield Run(local_svm, tmp_path_factory.mktemp("exit-codes"))


def _finish(proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"still running after {timeout} s:\n{out[-4000:]}") from None
    assert "Traceback" not in out and "ExceptionGroup" not in out, out
    return out


def test_create_run_for_a_run_that_exists_says_so(run: Run) -> None:
    res = run.owner_cli(["create-run", "--run-id", RUN_ID])
    assert res.returncode == 2
    assert _errors(res.stderr) == [
        f"error: run {RUN_ID!r} already exists (its coordinator instance is "
        + res.stderr.split("coordinator instance is ")[1].split(")")[0]
        + "): choose another --run-id, or change this run with update-config"
    ]
    assert "custom program error" not in res.stderr


def test_an_unknown_run_id_is_a_configuration_error_not_restarted(run: Run) -> None:
    out = _finish(run.container(run.joiner(), run_id="no-such-run"), 240)
    assert "run 'no-such-run' does not exist" in out
    assert out.count("starting:") == 1  # not restarted
    assert "client exited with code 2" in out


def test_an_unauthorized_joiner_is_told_which_key_to_delegate_and_not_restarted(
    run: Run,
) -> None:
    """No authorization for everyone exists (the run's join authority created none)."""
    joiner = run.joiner()
    t0 = time.monotonic()
    out = _finish(run.container(joiner), 240)
    assert time.monotonic() - t0 < 240
    assert "client exited with code 2" in out and out.count("starting:") == 1
    flat = " ".join(out.split())  # the console log wraps long lines
    assert (
        f"ERROR wallet {joiner.pubkey()} may not join run {RUN_ID!r}: the run is not "
        "permissionless" in flat
    ), out[-3000:]
    assert "`psyche-solana-client join-authorization-create` without --authorizer" in flat
    assert flat.count(f"wallet {joiner.pubkey()} may not join") == 1, out[-3000:]  # logged once


def test_a_joiner_its_grantee_has_not_delegated_is_told_the_command(run: Run) -> None:
    grantee, joiner = Keypair(), run.joiner()
    res = run.owner_cli(["join-authorization-create", "--authorizer", str(grantee.pubkey())])
    assert res.returncode == 0, res.stderr
    out = _finish(run.container(joiner, AUTHORIZER=str(grantee.pubkey())), 240)
    assert "client exited with code 2" in out and out.count("starting:") == 1
    flat = " ".join(out.split())
    assert (
        f"it is neither grantee {grantee.pubkey()} nor one of its delegates; the grantee "
        f"delegates this key with `psyche-solana-client join-authorization-delegate "
        f"--join-authority {run.owner.pubkey()} --delegates-added {joiner.pubkey()}`" in flat
    ), out[-3000:]
    assert flat.count("nor one of its delegates") == 1, out[-3000:]  # logged once


def test_a_joiner_of_another_version_exits_10_said_once_and_not_restarted(run: Run) -> None:
    """The run, paused, requires another client version for a while (the version gate comes
    before any join, so no authorization is needed); then it is resumed as it was."""

    def owner(*args: str) -> None:
        res = run.owner_cli([args[0], "--run-id", RUN_ID, *args[1:]])
        assert res.returncode == 0, res.stderr

    owner("set-paused", "pause")
    owner("update-config", "--client-version", "0.0.0-needed")
    try:
        out = _finish(run.container(run.joiner()), 240)
    finally:
        owner("update-config", "--client-version", "test")
        owner("set-paused", "resume")
    assert "client exited with code 10" in out and out.count("starting:") == 1, out[-3000:]
    flat = " ".join(out.split())
    assert flat.count("but the run requires '0.0.0-needed'") == 1, out[-3000:]  # logged once


def test_a_joiner_the_coordinator_withdraws_exits_3_without_a_traceback(run: Run) -> None:
    """Last: it leaves the run paused."""
    res = run.owner_cli(["join-authorization-create"])  # now everyone may join
    assert res.returncode == 0, res.stderr
    proc = run.container(run.joiner(), PSYCHE_MAX_RESTARTS="0")  # 3 is restarted: rejoin
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 240
    for line in proc.stdout:
        seen.append(line)
        if "joined epoch" in line:
            break
        assert time.monotonic() < deadline, "".join(seen)[-3000:]
    res = run.owner_cli(["set-paused", "--run-id", RUN_ID, "pause"])
    assert res.returncode == 0, res.stderr
    out = "".join(seen) + _finish(proc, 120)
    assert "client exited with code 3" in out
    errors = [line for line in out.splitlines() if " ERROR " in line or "error:" in line]
    assert len(errors) == 1, errors  # the withdrawal, logged once


def test_sigterm_to_the_container_stops_a_joiner_cleanly(run: Run) -> None:
    """After the withdrawal test (it paused the run; everyone may join): ``docker stop`` sends
    SIGTERM to the entry point alone, which hands it to the client, here right as the client has
    joined and starts its P2P node (issue 28: "shut down cleanly", then ``ERROR Future exception
    was never retrieved … NodeStopped``)."""
    res = run.owner_cli(["set-paused", "--run-id", RUN_ID, "resume"])
    assert res.returncode == 0, res.stderr
    proc = run.container(run.joiner(), PSYCHE_MAX_RESTARTS="0")
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 240
    for line in proc.stdout:
        seen.append(line)
        if "joined epoch" in line:
            break
        assert time.monotonic() < deadline, "".join(seen)[-3000:]
    proc.send_signal(signal.SIGTERM)
    out = "".join(seen) + _finish(proc, 120)
    assert proc.returncode == 143, out[-3000:]
    assert "terminated (SIGTERM); shut down cleanly" in out, out[-3000:]
    assert " ERROR " not in out and "never retrieved" not in out, out[-3000:]
    assert out.count("starting:") == 1


def test_a_run_creator_command_on_an_unknown_run_names_the_runs_that_exist(run: Run) -> None:
    """The local SVM serves ``getProgramAccounts`` (found missing by the differential test
    against a real validator, tests/validator), so the answer lists the run ids that exist."""
    res = run.owner_cli(["set-paused", "--run-id", "no-such-run", "resume"])
    assert res.returncode == 2, res.stderr
    (line,) = _errors(res.stderr)
    assert line.startswith("error: run 'no-such-run' does not exist"), line
    assert f"runs that exist: {RUN_ID!r}" in line, line


def test_a_priority_fee_is_paid_at_the_price_asked(run: Run) -> None:
    """``--compute-unit-price`` (COMPUTE_UNIT_PRICE in a joiner's env file): the transaction
    carries ``SetComputeUnitPrice`` and pays ceil(price × limit / 10⁶) lamports on top of the
    signature fee; without it, no priority fee."""
    from solders.compute_budget import ID as COMPUTE_BUDGET
    from solders.transaction import VersionedTransaction

    def fee_and_budget(state: str, price: int | None) -> tuple[int, list[bytes]]:
        args = ["set-paused", "--run-id", RUN_ID, state]
        if price is not None:
            args += ["--compute-unit-price", str(price)]
        res = run.owner_cli(args)
        assert res.returncode == 0, res.stderr
        sig = res.stdout.split()[-1].strip('"')
        tx = run.node.transaction(sig)
        assert tx is not None, res.stdout
        parsed = VersionedTransaction.from_bytes(tx.wire)
        keys = parsed.message.account_keys
        budget = [
            bytes(ix.data)
            for ix in parsed.message.instructions
            if keys[ix.program_id_index] == COMPUTE_BUDGET
        ]
        return tx.fee, budget

    base_fee, plain = fee_and_budget("pause", None)
    assert [d[0] for d in plain] == [2]  # SetComputeUnitLimit only
    fee, budget = fee_and_budget("resume", 250_000)  # the run resumed as it was
    assert [d[0] for d in budget] == [2, 3]  # SetComputeUnitLimit, SetComputeUnitPrice
    limit = int.from_bytes(budget[0][1:5], "little")
    assert int.from_bytes(budget[1][1:9], "little") == 250_000
    assert fee == base_fee + -(-250_000 * limit // 10**6), (fee, base_fee, limit)
    res = run.owner_cli(["set-paused", "--run-id", RUN_ID, "resume", "--compute-unit-price", "-1"])
    assert res.returncode == 2 and "--compute-unit-price" in res.stderr, res.stderr
