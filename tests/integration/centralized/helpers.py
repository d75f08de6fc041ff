"""A real ``psyche centralized-server run`` subprocess and honest clients for the scenarios."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from psyche.backends.centralized.backend import CentralizedBackend
from psyche.coordinator import Coordinator, RunState, Witness
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.identity import SecretKey
from support.net import free_port

ROOT = Path(__file__).resolve().parents[3]

CONFIG = {
    "warmup_time": 20,
    "cooldown_time": 1,
    "epoch_time": 30,
    "max_round_train_time": 20,
    "round_witness_time": 1,
    "min_clients": 1,
    "init_min_clients": 2,
    "global_batch_size_start": 4,
    "global_batch_size_end": 4,
    "global_batch_size_warmup_tokens": 0,
    "verification_percent": 0,
    "witness_nodes": 1,
    "total_steps": 100,
    "waiting_for_members_extra_time": 1,
}

MODEL = """
[model.LLM]
architecture = "HfLlama"
data_type = "Pretraining"
max_seq_len = 16
cold_start_warmup_steps = 0
data_location = {data_location}

[model.LLM.checkpoint.Hub]
repo_id = "runs/tiny/model"

[model.LLM.lr_schedule.Constant]
base_lr = 1.0e-3
warmup_steps = 0
warmup_init_lr = 0.0

[model.LLM.optimizer.Distro]
compression_decay = 0.999
compression_chunk = 64
compression_topk = 8
quantize_1bit = true
"""


def write_state(
    path: Path, run_id: str = "tiny", data_location: str = '"Dummy"', **config: int
) -> Path:
    cfg = {**CONFIG, **config}
    lines = [f'run_id = "{run_id}"', 'run_state = "WaitingForMembers"', "", "[config]"]
    lines += [f"{k} = {v}" for k, v in cfg.items()]
    path.write_text("\n".join(lines) + "\n" + MODEL.format(data_location=data_location))
    return path


def start_server(
    procs: list[subprocess.Popen[bytes]], state: Path, port: int, *extra: str, log: Path
) -> subprocess.Popen[bytes]:
    """Start the server, register it for reaping, and wait until it accepts connections."""
    cmd = [
        sys.executable,
        "-m",
        "psyche.cli.main",
        "centralized-server",
        "run",
        "--state",
        str(state),
        "--server-port",
        str(port),
        "--host",
        "127.0.0.1",
        "--tui",
        "false",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "client")}
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    procs.append(proc)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"server did not listen within 60 s:\n{log.read_text()}")


def start_joined_client(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> tuple[subprocess.Popen[str], list[str]]:
    """A server whose run waits for a second member, and one real client process (its own
    session, console logs) that has joined it, its P2P node starting; with the lines it logged
    up to joining. The caller ends the client (its process group)."""
    port = free_port()
    # Two members needed: the lone client waits in WaitingForMembers, its P2P node up.
    state = write_state(tmp_path / "state.toml", init_min_clients=2)
    start_server(procs, state, port, log=tmp_path / "server.log")
    argv = [str(Path(sys.executable).parent / "psyche-centralized-client"), "train"]
    argv += ["--run-id", "tiny", "--server-addr", f"127.0.0.1:{port}", "--logs", "console"]
    argv += ["--device", "cpu", "--bind-p2p-host", "127.0.0.1"]
    client = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert client.stdout is not None
    seen: list[str] = []
    for line in client.stdout:
        seen.append(line)
        if "joined run" in line:
            break
    return client, seen


def backend(
    port: int, seed: int, run_id: str = "tiny", max_backoff: float = 5.0
) -> CentralizedBackend:
    key = SecretKey.from_bytes(bytes([seed]) * 32)
    return CentralizedBackend(f"127.0.0.1:{port}", key, run_id, max_backoff=max_backoff)


async def wait_state(
    b: CentralizedBackend, pred: Callable[[Coordinator], bool], timeout: float = 20.0
) -> Coordinator:
    """The first state ``b`` receives that satisfies ``pred``."""

    async def loop() -> Coordinator:
        while True:
            s = await b.wait_for_new_state()
            if pred(s):
                return s

    return await asyncio.wait_for(loop(), timeout)


def warmup_witness(state: Coordinator, b: CentralizedBackend) -> Witness:
    index = state.index_of(b.identity)
    assert index is not None, "not an epoch client"
    return Witness(WitnessProof(index, index, False), Bloom.empty(), Bloom.empty())


def round_witness(state: Coordinator, b: CentralizedBackend) -> Witness:
    """The witness ``b`` would send this round (elected or not)."""
    index = state.index_of(b.identity)
    assert index is not None, "not an epoch client"
    proof = state.committee_selection(state.current_round()).get_witness(index)
    return Witness(proof, Bloom.empty(1), Bloom.empty(2))


def in_state(*states: RunState) -> Callable[[Coordinator], bool]:
    return lambda s: s.run_state in states
