"""Two real client processes that compute differently hold bit-identical weights for 20 rounds.

Each process trains its own batches with the real `Trainer` and applies both clients' payloads of
round h−2 at the start of round h (`distro_pair_client.py`). One runs with one thread on this
machine's vector kernels; the other with two threads, ATEN's scalar CPU kernels
(`ATEN_CPU_CAPABILITY=default`) and MKL's SSE2 branch without FMA (`MKL_CBWR=COMPATIBLE`), as a
client on different hardware would. With a GPU the second client runs on CUDA instead.

On this 2-core CPU the float-matmul apply also happened to keep these runs identical (its
disagreements need sums that are exactly zero, which 20 rounds of this model did not produce;
tests/integration/determinism/test_apply_across_kernels.py shows them on constructed payloads); the
CUDA variant is the one where the old apply is expected to diverge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from psyche.training import Preset, write_model_dir

CLIENT = Path(__file__).with_name("distro_pair_client.py")
ROUNDS = 20
SMALL = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=32)

pytestmark = pytest.mark.slow


def run_pair(
    tmp_path: Path,
    reap: list[subprocess.Popen[bytes]],
    second: tuple[int, dict[str, str], str],
    client: Path = CLIENT,
    rounds: int = ROUNDS,
) -> list[dict]:
    """Run ``client`` (a pair-client script) as two processes, the first on one CPU thread and the
    second as ``second`` = (threads, extra env, device) says; returns each one's JSON report."""
    model = tmp_path / "model"
    write_model_dir(model, preset=SMALL, seed=0)
    shared = tmp_path / "shared"
    shared.mkdir()
    procs = []
    for index, (threads, env, device) in enumerate([(1, {}, "cpu"), second]):
        cmd = [
            sys.executable, str(client), "--index", str(index), "--clients", "2",
            "--dir", str(shared), "--model", str(model), "--rounds", str(rounds),
            "--threads", str(threads), "--device", device,
        ]  # fmt: skip
        environ = {**os.environ, "OMP_NUM_THREADS": str(threads), **env}
        proc = subprocess.Popen(cmd, env=environ, stderr=subprocess.PIPE)
        reap.append(proc)
        procs.append(proc)
    for proc in procs:
        _, err = proc.communicate(timeout=150)
        assert proc.returncode == 0, err.decode()[-3000:]
    return [json.loads((shared / f"client{i}.json").read_text()) for i in range(2)]


def check_identical(clients: list[dict]) -> None:
    first, second = clients
    assert len(first["hashes"]) == len(second["hashes"]) == ROUNDS
    assert first["hashes"] == second["hashes"]
    # The weights do move every round from round 2 on, so agreeing is not trivial.
    assert len(set(first["hashes"])) == ROUNDS - 1


def test_clients_with_other_threads_and_cpu_kernels_agree_for_20_rounds(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    other = (2, {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}, "cpu")
    clients = run_pair(tmp_path, reap_children, other)
    assert clients[0]["threads"] == 1 and clients[1]["threads"] == 2
    assert clients[1]["capability"] == "DEFAULT"
    check_identical(clients)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CPU-vs-CUDA needs a GPU")
def test_cpu_and_cuda_clients_agree_for_20_rounds(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    clients = run_pair(tmp_path, reap_children, (1, {}, "cuda"))
    assert clients[1]["device"].startswith("cuda")
    check_identical(clients)
