"""End to end with real processes on 127.0.0.1: a server, client daemons, libp2p, the data server.

Each test runs a whole (short) run through the local testnet and checks the summary it writes:
rounds end opportunistically, every client holds identical weights after every apply, the loss
falls, a crashed client is ejected by health checks, a late joiner fetches the model from the
previous epoch's clients over P2P and trains from the next epoch with identical weights.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from psyche.daemon.result_serving import KEEP_ROUNDS
from psyche.evals import write_synthetic_task
from psyche.events import (
    ApplyEvent,
    EvalEvent,
    ModelLoadedEvent,
    OptimStatsEvent,
    StateEvent,
    TrainEvent,
    read_events,
)
from psyche.testnet.launcher import Testnet, TestnetOptions, epochs_completed, make_testnet
from support.net import free_port

from .conftest import ROOT, TINY, write_run_dir
from .explorer_browser import BrowserWatch, check_rounds_timeline, check_run_watched

pytestmark = pytest.mark.slow


def hashes_agree(rounds: list[dict]) -> bool:
    return all(len(set(r["model_hash"].values())) <= 1 for r in rounds)


def test_three_clients_finish_an_epoch_with_identical_weights(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    """Also the testnet's documented metrics and debugging flags, which must not disturb the
    run: W&B (offline: no key, nothing leaves the machine), evals at cooldown, log files,
    optimizer statistics and the DisTrO payloads written to disk. The server's port is left to
    the testnet (a free one)."""
    write_run_dir(tmp_path / "cfg", local_inputs, data_port=free_port(), total_steps=9)
    summary = tmp_path / "summary.json"
    write_synthetic_task(tmp_path / "task", docs=8, seed=0)
    net = tmp_path / "net"
    # Every path relative to the folder it runs in, as a user there would type them (issue 37).
    cmd = [
        sys.executable,
        "-m",
        "psyche.cli.main",
        "centralized-local-testnet",
        "start",
        "--config-path",
        "cfg",
        "--tui",
        "false",
        "--out",
        "net",
        "--summary",
        "summary.json",
        "--timeout",
        "400",
        "--wandb-project",
        "psyche-e2e",
        "--wandb-group",
        "ci",
        "--eval-tasks",
        "task",
        "--write-log",
        "--optim-stats",
        "3",
        "--write-distro-data",
        "distro",
        "--log",
        "warn,psyche.status=info",
        # The explorer's browser checks ride on this run (tests/e2e/explorer_browser.py).
        "--explorer",
        str(free_port()),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    wandb_home = tmp_path / "wandb-home"
    env.update(
        WANDB_MODE="offline",
        WANDB_CONFIG_DIR=str(wandb_home / "config"),
        WANDB_CACHE_DIR=str(wandb_home / "cache"),
        WANDB_DATA_DIR=str(wandb_home / "data"),
    )
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path
    )
    reap_children.append(proc)
    with BrowserWatch(net, "tiny", "centralized") as browser:
        out, _ = proc.communicate(timeout=450)
    assert proc.returncode == 0, out.decode()[-3000:]
    for n in (1, 2, 3):
        label = f"client-{n}"
        # W&B's offline run directory, one per client, under the testnet's output.
        runs = list((net / "wandb").glob("offline-run-*"))
        assert len(runs) == 3, runs
        assert all(list(r.glob("run-*.wandb")) for r in runs)
        # --write-log: each client's own log file, at the --log levels (status lines only).
        text = (net / "write-logs" / f"{label}.log").read_text()
        assert "INFO psyche.status: step 1 " in text, text[-2000:]
        assert "INFO psyche.client" not in text, text[-2000:]
        events = read_events(net / "events" / f"{label}.jsonl")
        evals = [e for e in events if isinstance(e, EvalEvent)]
        assert evals and evals[-1].task == "task" and evals[-1].docs == 8
        stats = [e for e in events if isinstance(e, OptimStatsEvent)]
        assert stats and all(e.step % 3 == 0 for e in stats)
        # Results stay served for the last rounds only (psyche.daemon.result_serving): at most
        # its own and two peers' of KEEP_ROUNDS rounds, where every one of the run's was before.
        served = [e.served_blobs for e in events if isinstance(e, ApplyEvent)]
        assert len(served) >= 9 and max(s or 0 for s in served) <= 3 * KEEP_ROUNDS, served
        assert list((tmp_path / "distro" / label).glob("*.payload"))
    s = json.loads(summary.read_text())
    rounds = s["rounds"]
    assert s["epochs_completed"] == 1 and s["final_state"] == "Finished"
    # The evals in the summary and the closing report.
    assert {e["client"] for e in s["evals"]} == {"client-1", "client-2", "client-3"}
    assert all(e["task"] == "task" and e["docs"] == 8 for e in s["evals"])
    assert "eval client-1 task (step" in out.decode()
    assert len(rounds) >= 6
    assert all(r["end_reason"] == "opportunistic" for r in rounds), rounds
    assert hashes_agree(rounds)
    assert all(len(r["model_hash"]) == 3 for r in rounds)
    trained = [r for r in rounds if r["loss"]]
    first, last = trained[0]["loss"], trained[-1]["loss"]
    assert sum(last.values()) / 3 < 0.85 * sum(first.values()) / 3
    assert summary.with_suffix(".png").stat().st_size > 1000
    seen = browser.result()
    if seen is not None:
        assert "explorer: http://127.0.0.1:" in out.decode()
        check_run_watched(seen, s, total_steps=9)
        assert seen.phases[-1] == "Finished", seen.phases
        check_rounds_timeline(seen, s)


def _run(net: Testnet, hook) -> dict:
    return net.run(hook).to_json()


def _states(net: Testnet) -> list[StateEvent]:
    return net.states()


def test_killed_client_is_ejected_by_health_checks_and_the_run_continues(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    cfg = write_run_dir(
        tmp_path / "cfg",
        local_inputs,
        data_port=free_port(),
        total_steps=14,
        witness_nodes=0,
        max_round_train_time=8,
        epoch_time=400,
    )
    opts = TestnetOptions(
        config_path=cfg,
        num_clients=3,
        server_port=free_port(),
        out_dir=tmp_path / "net",
        timeout_s=400,
        server_args=("--withdraw-on-disconnect", "false"),
    )
    net = make_testnet(opts, lambda m: None)
    killed_at: list[int] = []

    def hook(n: Testnet) -> None:
        states = _states(n)
        if (
            not killed_at
            and states
            and states[-1].run_state in ("RoundTrain", "RoundWitness")
            and states[-1].step >= 3
        ):
            killed_at.append(states[-1].step)
            n.kill_client("client-3")

    s = _run(net, hook)
    assert killed_at, "the run ended before the kill"
    victim = read_events(net.client_log("client-3"))[0].client
    seen = [e.clients.get(victim) for e in _states(net)]
    assert "Ejected" in seen, "the crashed client was never ejected by a health check"
    assert s["final_state"] == "Finished"
    after = [r for r in s["rounds"] if r["step"] > killed_at[0] + 3]
    assert after and all(r["loss"] for r in after if r["height"] < 100 and r["loss"])
    assert hashes_agree(s["rounds"])
    assert s["clients"]["client-3"]["kills"] == 1 and s["clients"]["client-3"]["drops"] >= 1
    # Once the crashed client has left, rounds end early again.
    assert any(r["end_reason"] == "opportunistic" for r in after)
    # No lost work: the crashed client's intervals were handed out again and trained.
    retried = [(r["step"], b) for r in s["rounds"] for b in r["retries"]]
    assert retried, "no interval of the crashed client was re-assigned"
    for step, b in retried:
        r = next(r for r in s["rounds"] if r["step"] == step)
        assert b in r["trained"], (step, b, r["trained"])


@pytest.mark.parametrize("optimizer", ["distro", "sparseloco"])
def test_late_joiner_fetches_the_model_from_peers_and_trains_with_identical_weights(
    tmp_path: Path,
    local_inputs: tuple[Path, Path],
    reap_children: list,
    optimizer: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With SparseLoCo (config/tiny-sparseloco, outer momentum on) the joiner also needs the
    run's optimizer state: the momentum comes with the model from the peers, or its first
    apply would move its weights unlike theirs. The clients keep their P2P blobs (the model's
    pieces among them) where P2P_BLOB_DIR says, each in a directory of its own removed at
    exit."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    monkeypatch.setenv("P2P_BLOB_DIR", str(blobs))  # the clients inherit the environment
    cfg = write_run_dir(
        tmp_path / "cfg",
        local_inputs,
        data_port=free_port(),
        base=TINY if optimizer == "distro" else ROOT / "config" / "tiny-sparseloco",
        total_steps=300,
        # The joiner's process starts during the first epoch and must be up by the second's
        # warmup: 55 s here, against 15–25 s for a client to start on a loaded 2-core machine.
        epoch_time=30,
        warmup_time=15,
        cooldown_time=10,
        max_round_train_time=10,
    )
    opts = TestnetOptions(
        config_path=cfg,
        num_clients=3,
        server_port=free_port(),
        out_dir=tmp_path / "net",
        timeout_s=600,
        # An upper bound: the hook ends the run once the joiner has trained through an epoch
        # (one more epoch when its process starts too slowly to make the second).
        epochs=3,
        # Short: checkpoint paths must fit the coordinator's 64-byte repo id.
        checkpoint_dir=Path(tempfile.mkdtemp(prefix="psyche-ck-")),
    )
    net = make_testnet(opts, lambda m: None)

    def joiner_done(states: list[StateEvent]) -> bool:
        events = read_events(net.client_log("client-4"))
        loaded = [e for e in events if isinstance(e, ModelLoadedEvent)]
        if not loaded or not any(isinstance(e, TrainEvent) for e in events):
            return False
        return any(s.run_state == "Cooldown" and s.step > loaded[0].step for s in states)

    def hook(n: Testnet) -> bool:
        states = _states(n)
        if "client-4" not in n.clients and states and states[-1].run_state != "WaitingForMembers":
            n.start_client(4)
        return joiner_done(states)

    s = _run(net, hook)
    joiner = read_events(net.client_log("client-4"))
    loaded = [e for e in joiner if isinstance(e, ModelLoadedEvent)]
    # The joiner got the model from the previous epoch's clients over P2P, from several of them.
    assert loaded and loaded[0].source == "p2p", loaded
    assert len(loaded[0].peers) >= 2, loaded
    join_step = loaded[0].step
    trains = [e for e in joiner if isinstance(e, TrainEvent)]
    assert trains and min(e.step for e in trains) >= join_step
    later = [r for r in s["rounds"] if r["step"] >= join_step]
    assert later and all("client-4" in r["model_hash"] for r in later)
    # Its weights equal the servers' from its first round on, and stay equal.
    first = min(later, key=lambda r: r["step"])
    assert loaded[0].model_hash in first["model_hash"].values()
    assert hashes_agree(s["rounds"])
    if optimizer == "sparseloco":
        # Applies with the momentum took place after it joined (the weights moved) ...
        assert len({r["model_hash"]["client-4"] for r in later}) > 2, later
        # ... and the state also rides with every saved checkpoint.
        saved = list(opts.checkpoint_dir.glob("*/optimizer_state.safetensors"))
        assert saved, list(opts.checkpoint_dir.iterdir())
    for n in (1, 2, 3, 4):
        text = (net.out / "logs" / f"client-{n}.log").read_text()
        # Joined: a console log wraps long lines.
        assert f"P2Pblobsarekeptin{blobs}/psyche-p2p-" in "".join(text.split()), text[-2000:]
    assert list(blobs.iterdir()) == []  # each removed when its client stopped


def test_random_kills_over_three_epochs_rejoin_by_p2p_with_identical_weights(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    """4 clients, one random SIGKILL (and restart) every ``interval`` seconds, 3 epochs: every
    epoch finishes, each restarted client loads the model from its peers over P2P, all clients
    present agree on the weights after every apply, and no client crashes on its own."""
    cfg = write_run_dir(
        tmp_path / "cfg",
        local_inputs,
        data_port=free_port(),
        total_steps=300,
        epoch_time=30,
        warmup_time=12,
        cooldown_time=8,
        max_round_train_time=8,
        init_min_clients=4,
        min_clients=2,
    )
    opts = TestnetOptions(
        config_path=cfg,
        num_clients=4,
        server_port=free_port(),
        out_dir=tmp_path / "net",
        timeout_s=900,
        random_kill_num=1,
        random_kill_interval=45,
        seed=1,
        checkpoint_dir=Path(tempfile.mkdtemp(prefix="psyche-ck-")),
    )
    net = make_testnet(opts, lambda m: None)

    def enough(n: Testnet) -> bool:
        # Stop on what the test needs, not on time: a fast (idle) machine finished 3 epochs
        # before the second kill was due (45 s apart), a slow one takes longer for both.
        kills = sum(t.kills for t in n.tallies.values())
        return epochs_completed(n.states()) >= 3 and kills >= 2

    s = _run(net, enough)
    assert s["epochs_completed"] >= 3, s["epochs"]
    kills = [k for ep in s["epochs"] for k in ep["kills"]]
    assert len(kills) >= 2, s["epochs"]
    # Every restart is one of ours: joins = 1 + kills (a crash would be restarted as a join).
    for label, tally in s["clients"].items():
        assert tally["joins"] == 1 + tally["kills"], (label, tally)
    # Each killed client came back and loaded the model over P2P from the previous epoch's
    # clients in a later epoch (a client killed in the last epoch may not have had the time).
    joiners = [j for ep in s["epochs"][1:] for j in ep["joiners"]]
    assert joiners, s["epochs"]
    assert all(j["source"] == "p2p" and j["peers"] >= 1 for j in joiners), joiners
    # (A client killed during the first epoch's warmup may rejoin it from the Hub checkpoint.)
    rejoined = {j["client"] for ep in s["epochs"] for j in ep["joiners"]}
    # Every client killed in an epoch that another trained epoch followed took part in that one.
    eps = s["epochs"]
    killed_before_last = {
        k["client"] for ep, nxt in itertools.pairwise(eps) if nxt["steps"] for k in ep["kills"]
    }
    assert killed_before_last <= rejoined, (killed_before_last, rejoined)
    for ep in s["epochs"][1:]:
        assert ep["checkpoint"].startswith("P2P"), ep
    # Identical weights among the clients present after every apply.
    assert hashes_agree(s["rounds"])
    applied = [r for r in s["rounds"] if len(r["model_hash"]) >= 2]
    assert len(applied) >= 10


def test_data_and_tensor_parallel_clients_keep_identical_weights(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    """A run of three real client processes, one with --data-parallelism 2 (a worker process
    beside it), one with --tensor-parallelism 2 and one plain: each sends one payload per batch,
    and all three hold bit-identical weights after every apply."""
    cfg = write_run_dir(tmp_path / "cfg", local_inputs, data_port=free_port(), total_steps=6)
    opts = TestnetOptions(config_path=cfg, num_clients=3, out_dir=tmp_path / "net", timeout_s=400)
    net = make_testnet(opts, lambda m: None)
    shared = net.client_settings
    extra = {"client-1": {"DATA_PARALLELISM": "2"}, "client-2": {"TENSOR_PARALLELISM": "2"}}
    net.client_settings = lambda label: {**shared(label), **extra.get(label, {})}  # type: ignore[method-assign]
    s = _run(net, lambda n: None)
    assert s["final_state"] == "Finished"
    assert hashes_agree(s["rounds"])
    assert all(len(r["model_hash"]) == 3 for r in s["rounds"])
    trained = [r for r in s["rounds"] if r["loss"]]
    assert trained and all(len(r["loss"]) == 3 for r in trained)
    log = (tmp_path / "net" / "logs" / "client-1.log").read_text()
    assert "dataparallelism2" in "".join(log.split()), log[-2000:]
    log = (tmp_path / "net" / "logs" / "client-2.log").read_text()
    assert "tensorparallelism2" in "".join(log.split()), log[-2000:]


def test_parallel_clients_commit_to_their_samples_and_pass_verification(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    """A run that verifies every result (``verification_percent = 100``) with one client on
    --data-parallelism 2 and one on --tensor-parallelism 2 beside a plain one: the DP replicas
    fingerprint their own micro-batches, the TP ranks read the probed coordinates in their
    slices and sum them over the group, and each payload carries the commitments of every
    micro-batch in batch order, so the others, recomputing its committed samples on one device,
    vote match every round; nobody is accused and all three keep identical weights. (Before,
    the loader refused a data-parallel client in a run that verifies, and later a
    tensor-parallel one.)"""
    from psyche.protocol.identity import SecretKey

    cfg = write_run_dir(
        tmp_path / "cfg",
        local_inputs,
        data_port=free_port(),
        total_steps=5,
        verification_percent=100,
        global_batch_size_start=12,
        global_batch_size_end=12,
    )
    opts = TestnetOptions(
        config_path=cfg, num_clients=3, out_dir=tmp_path / "net", timeout_s=400, micro_batch_size=1
    )
    net = make_testnet(opts, lambda m: None)
    shared = net.client_settings
    parallel = {"client-1": {"DATA_PARALLELISM": "2"}, "client-2": {"TENSOR_PARALLELISM": "2"}}
    net.client_settings = lambda label: {  # type: ignore[method-assign]
        **shared(label),
        **parallel.get(label, {}),
    }
    s = _run(net, lambda n: None)
    assert s["final_state"] == "Finished"
    assert hashes_agree(s["rounds"])
    assert all(len(r["model_hash"]) == 3 for r in s["rounds"])
    logs = {i: (tmp_path / "net" / "logs" / f"client-{i}.log").read_text() for i in (1, 2, 3)}
    lines = {i: [" ".join(ln.split()) for ln in log.splitlines() if "verified step" in ln]
             for i, log in logs.items()}  # fmt: skip
    assert not [ln for v in lines.values() for ln in v if "MISMATCH" in ln], lines
    for i, flag in ((1, "dataparallelism2"), (2, "tensorparallelism2")):
        key = SecretKey.from_bytes((tmp_path / "net" / "keys" / f"client-{i}.key").read_bytes())
        tag = key.node_identity().hex()[:8]
        judged = [ln for j in (1, 2, 3) if j != i for ln in lines[j]
                  if f" {tag}: " in ln and ln.endswith("match")]  # fmt: skip
        assert len(judged) >= 2, lines  # its results were judged by the others, and matched
        assert flag in "".join(logs[i].split()), logs[i][-2000:]
