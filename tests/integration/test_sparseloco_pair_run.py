"""Two real SparseLoCo client processes that compute differently hold bit-identical weights.

Each trains its own batches (4 inner AdamW steps per round) and applies both clients' payloads of
round h−2 at the start of round h (`sparseloco_pair_client.py`). One runs with one thread on this
machine's vector kernels; the other with two threads, ATEN's scalar CPU kernels
(`ATEN_CPU_CAPABILITY=default`) and MKL without FMA (`MKL_CBWR=COMPATIBLE`), as a client on other
hardware would; with a GPU, a CUDA client too. The outer momentum is on, so the run-global state
is exercised as well.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from . import test_apply_determinism_run as determinism_run

CLIENT = Path(__file__).with_name("sparseloco_pair_client.py")
ROUNDS = 8

pytestmark = pytest.mark.slow


def run_pair(
    tmp_path: Path, reap: list[subprocess.Popen[bytes]], second: tuple[int, dict[str, str], str]
) -> list[dict]:
    return determinism_run.run_pair(tmp_path, reap, second, client=CLIENT, rounds=ROUNDS)


def check_identical(clients: list[dict]) -> None:
    first, second = clients
    assert len(first["hashes"]) == ROUNDS
    assert first["hashes"] == second["hashes"]
    # The weights move at every apply (rounds 2..), so agreeing is not trivial.
    assert len(set(first["hashes"])) == ROUNDS - 1
    for c in clients:
        assert c["sizes"] == [c["bound"]]  # every payload exactly the advertised size
        assert c["global_state_keys"]  # the outer momentum is the run-global state


def test_sparseloco_clients_with_other_threads_and_cpu_kernels_agree(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    other = (2, {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}, "cpu")
    clients = run_pair(tmp_path, reap_children, other)
    assert clients[0]["threads"] == 1 and clients[1]["threads"] == 2
    assert clients[1]["capability"] == "DEFAULT"
    check_identical(clients)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CPU-vs-CUDA needs a GPU")
def test_sparseloco_cpu_and_cuda_clients_agree(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    clients = run_pair(tmp_path, reap_children, (1, {}, "cuda"))
    assert clients[1]["device"].startswith("cuda")
    check_identical(clients)
