"""End to end on a local SVM: ``psyche-solana-local-testnet start`` with 3 clients, one epoch.

The SBF builds of both programs run in ``psyche-local-svm`` (an SVM behind an RPC front); the run
is created, configured, authorized and resumed by the run creator's documented commands, and 3
``psyche-solana-client train`` processes configured by env files train it over real libp2p on
127.0.0.1, finding each other only through their peer records on the chain (no bootstrap
peers). The test checks the summary the launcher writes (an epoch completed, identical weights
after every apply, an opportunistic round end, the loss plot) and that the coordinator program
itself executed the clients' joins, ticks, witnesses and warmup witnesses (the SVM's transaction
log, tallied by the launcher into ``program-calls.json``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from psyche.events import TrainEvent, read_events

from .chains import chain_flags_for_testnet
from .conftest import ROOT

SOLANA_CONFIG = ROOT / "config" / "tiny-solana"

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _sbf_build() -> None:
    # Fail, not skip: scripts/test.sh builds the programs first, and a skipped run would hide
    # that the decentralized path never ran.
    missing = [
        p
        for p in ("psyche_coordinator", "psyche_authorizer")
        if not (ROOT / "target" / "deploy" / f"{p}.so").is_file()
    ]
    if missing:
        pytest.fail(f"no SBF build of {', '.join(missing)}: run scripts/build-sbf.sh")


def solana_config(
    out: Path, inputs: tuple[Path, Path], base: Path = SOLANA_CONFIG, **config: int
) -> Path:
    """config/tiny-solana (or ``base``, a config of the same model and Local data) with
    ``[config]`` overrides, reading the shared model and token files."""
    model, data = inputs
    text = (base / "state.toml").read_text()
    head, sep, tail = text.partition("[model.LLM]")
    for key, value in config.items():
        head, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", head)
        assert n == 1, key
    tail = tail.replace('repo_id = "runs/tiny/model"', f'repo_id = "{model}"')
    tail = tail.replace('Local = "runs/tiny/data"', f'Local = "{data}"')
    out.mkdir(parents=True, exist_ok=True)
    (out / "state.toml").write_text(head + sep + tail)
    return out


def run_solana_testnet(cfg: Path, out: Path, summary: Path, *extra: str) -> tuple[int, str]:
    """``psyche-solana-local-testnet start`` with 3 clients for one epoch (plus ``extra``
    flags); its exit code and output. It runs in its own session, so whatever happens the
    launcher and every process it started are stopped. It runs in ``out``'s parent folder and
    is given every path relative to it, as a user in that folder would type them (issue 37: the
    run creator's steps once read key paths against another working directory)."""
    cwd = out.parent

    def rel(path: Path) -> str:
        return os.path.relpath(path, cwd)

    cmd = [
        str(Path(sys.executable).parent / "psyche-solana-local-testnet"),
        "start",
        "--config-path",
        rel(cfg),
        "--num-clients",
        "3",
        "--epochs",
        "1",
        "--tui",
        "false",
        "--out",
        rel(out),
        "--summary",
        rel(summary),
        "--timeout",
        "420",
        *extra,
    ]
    if "--rpc" not in extra:
        cmd += chain_flags_for_testnet()
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd
    )
    try:
        output, _ = proc.communicate(timeout=480)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    text = output.decode()
    print(f"psyche-solana-local-testnet took {time.monotonic() - started:.0f} s\n{text[-4000:]}")
    return proc.returncode, text


def test_three_solana_clients_train_an_epoch_with_sparseloco(
    tmp_path: Path, local_inputs: tuple[Path, Path]
) -> None:
    """config/tiny-solana-sparseloco: the program stores and checks the SparseLoCo optimizer,
    and the clients train with it (H inner AdamW steps, one payload per round, the outer step)
    with identical weights after every apply and a falling loss."""
    base = ROOT / "config" / "tiny-solana-sparseloco"
    cfg = solana_config(tmp_path / "cfg", local_inputs, base=base, total_steps=6)
    summary = tmp_path / "summary.json"
    rc, text = run_solana_testnet(cfg, tmp_path / "net", summary)
    assert rc == 0, text[-4000:]
    s = json.loads(summary.read_text())
    rounds = s["rounds"]
    trained = [r for r in rounds if r["loss"]]
    assert s["epochs_completed"] >= 1 and len(trained) >= 4, rounds
    assert all(len(r["model_hash"]) == 3 for r in trained), trained
    assert all(len(set(r["model_hash"].values())) == 1 for r in rounds), rounds
    first, last = trained[0]["loss"], trained[-1]["loss"]
    assert sum(last.values()) < 0.9 * sum(first.values()), (first, last)
    sizes = {
        e.payload_bytes
        for f in (tmp_path / "net" / "events").glob("client-*.jsonl")
        for e in read_events(f)
        if isinstance(e, TrainEvent)
    }
    assert len(sizes) == 1, sizes  # every SparseLoCo payload has its one exact size
