"""Apply gives the same bits across thread counts and CPU kernel sets, where the float-matmul apply
does not (issue 12, #11): `apply_probe.py` runs `Distro.apply` in processes of their own, with
`OMP_NUM_THREADS`, `ATEN_CPU_CAPABILITY` and `MKL_CBWR` set per variant. Slow (minutes on 2
cores); the fast, in-process checks of `decode_sign` are in
tests/unit/distro/test_apply_determinism.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unit.distro.test_apply_determinism import probe_inputs

PROBE = Path(__file__).with_name("apply_probe.py")


def run_probes(
    tmp_path: Path, variants: dict[str, tuple[int, dict[str, str], bool]]
) -> dict[str, dict]:
    """Run `apply_probe.py` once per variant, concurrently; returns each one's output."""
    src = tmp_path / "in.pt"
    torch.save(probe_inputs(), src)
    procs = {}
    for name, (threads, env, matmul) in variants.items():
        cmd = [sys.executable, str(PROBE), str(src), str(tmp_path / f"{name}.pt"), str(threads)]
        environ = {**os.environ, "OMP_NUM_THREADS": str(threads), **env}
        procs[name] = subprocess.Popen(
            [*cmd, *(["--matmul"] if matmul else [])], env=environ, stderr=subprocess.PIPE
        )
    out = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
        out[name] = torch.load(tmp_path / f"{name}.pt", weights_only=True)
    return out


# A CPU without AVX (ATEN's scalar kernels) and MKL's reproducible SSE2 branch (no FMA) stand in for
# other hardware; the four-thread run oversubscribes a 2-core machine on purpose.
OTHER_HARDWARE = {
    "threads4": (4, {}, False),
    "no_avx": (2, {"ATEN_CPU_CAPABILITY": "default"}, False),
    "no_fma": (1, {"MKL_CBWR": "COMPATIBLE"}, False),
}


@pytest.mark.slow
def test_apply_same_bits_across_threads_and_cpu_kernels(tmp_path: Path) -> None:
    variants = {"native": (1, {}, False), **OTHER_HARDWARE}
    out = run_probes(tmp_path, variants)
    ref = out["native"]
    for name in OTHER_HARDWARE:
        for key, value in ref["params"].items():
            assert torch.equal(out[name]["params"][key], value), (name, key)
        for a, b in zip(out[name]["signs"], ref["signs"], strict=True):
            assert torch.equal(a, b), name


@pytest.mark.slow
@pytest.mark.skipif(
    not torch.backends.mkl.is_available() or torch.backends.cpu.get_cpu_capability() == "DEFAULT",
    reason="needs MKL and a vector CPU kernel set to compare against",
)
def test_matmul_apply_differs_between_cpu_kernels(tmp_path: Path) -> None:
    """The code before `decode_sign` (apply through `sign(decode(·))`): on the same consensus
    payloads, a client without FMA moves weights that this machine's kernels do not."""
    out = run_probes(
        tmp_path, {"native": (1, {}, True), "no_fma": (1, {"MKL_CBWR": "COMPATIBLE"}, True)}
    )
    a, b = out["native"]["params"]["anti"], out["no_fma"]["params"]["anti"]
    differ = a != b
    assert differ.any()
    # Only weights whose exact update is zero (each tile's diagonal) disagree: rounding picks ±lr.
    rows, cols = differ.nonzero(as_tuple=True)
    assert torch.equal(rows % 64, cols % 64)
