"""SparseLoCo's `outer_apply` gives the same bits across thread counts and CPU kernel sets:
`sparseloco_probe.py` runs it in processes of their own, with `OMP_NUM_THREADS` and
`ATEN_CPU_CAPABILITY` set per variant, and the hashes of what they hold must agree. Slow; the math
and wire-format tests are in tests/unit/distro/test_sparseloco.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from psyche.distro import sparseloco as sl
from unit.distro.test_sparseloco import make_settings, rand_params

PROBE = Path(__file__).with_name("sparseloco_probe.py")


def _probe_inputs(tmp: Path) -> None:
    shapes = [(256, 512), (300,), (64, 100)]
    s = make_settings(2, chunk=4096, k=64, momentum=0.9)
    params = rand_params(shapes, 1)
    rounds = []
    states = [sl.SparseLoCoState(shapes, s) for _ in range(3)]
    start = [p.clone() for p in params]
    for r in range(3):
        wires = []
        for c, state in enumerate(states):
            end = [
                p - 1e-3 * q for p, q in zip(start, rand_params(shapes, 100 * r + c), strict=True)
            ]
            w = sl.encode_round(state, start, end, step=r, nonce=c)
            wires.append(torch.frombuffer(bytearray(w), dtype=torch.uint8))
        rounds.append(wires)
        sl.outer_apply(start, [sl.decode_payload(w.numpy().tobytes(), shapes, s) for w in wires],
                       sl.SparseLoCoState(shapes, s), s, 0.7)  # fmt: skip
    torch.save(
        {"shapes": shapes, "params": params, "rounds": rounds, "outer_lr": 0.7,
         "settings": {"topk_chunk": 4096, "topk": 64, "value_bits": 2, "error_decay": 0.95,
                      "outer_momentum": 0.9}},
        tmp / "inputs.pt",
    )  # fmt: skip


@pytest.mark.slow
def test_outer_apply_same_bits_across_threads_and_cpu_kernels(tmp_path: Path) -> None:
    _probe_inputs(tmp_path)
    variants = {
        "t1": (1, {}),
        "t2": (2, {}),
        "default": (2, {"ATEN_CPU_CAPABILITY": "default"}),
        "avx2": (1, {"ATEN_CPU_CAPABILITY": "avx2"}),
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(PROBE), str(tmp_path), str(threads)],
            env={**os.environ, "OMP_NUM_THREADS": str(threads), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name, (threads, env) in variants.items()
    }
    hashes = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
        hashes[name] = out.decode().strip()
    assert len(set(hashes.values())) == 1, hashes
