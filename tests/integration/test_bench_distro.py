"""`bench/distro_vs_adamw.py` end to end: a short run writes every figure the issue asks for."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "distro_vs_adamw.py"
KEYS = (
    "bytes_per_client_step",
    "bf16_grad_bytes",
    "compression_ratio_vs_bf16",
    "loss_distro",
    "loss_adamw",
    "loss_ratio_distro_over_adamw",
    "codec_fraction_of_fwd_bwd",
    "steps",
    "clients",
)
LIMIT_S = 150


@pytest.mark.slow
def test_quick_bench_writes_finite_positive_figures(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out.json"
    cmd = [sys.executable, str(SCRIPT), "--quick", "--steps", "8", "--clients", "2"]
    cmd += ["--presets", "tiny", "--profile-steps", "1"]
    cmd += ["--workdir", str(tmp_path / "work"), "--json", str(out)]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reap_children.append(proc)
    stdout, _ = proc.communicate(timeout=LIMIT_S)
    elapsed = time.monotonic() - started
    text = stdout.decode(errors="replace")
    assert proc.returncode == 0, text
    assert elapsed < LIMIT_S, f"took {elapsed:.0f} s"

    figures = json.loads(out.read_text())
    for key in KEYS:
        assert key in figures, f"missing {key!r}"
        value = figures[key]
        assert isinstance(value, int | float) and not isinstance(value, bool), (key, value)
        assert math.isfinite(value) and value > 0, (key, value)
    assert figures["steps"] == 8 and figures["clients"] == 2
    assert figures["compression_ratio_vs_bf16"] > 1
    assert figures["bf16_grad_bytes"] == 2 * figures["n_params"]
    assert figures["compression_ratio_vs_bf16"] == pytest.approx(
        figures["bf16_grad_bytes"] / figures["bytes_per_client_step"]
    )
    assert figures["loss_ratio_distro_over_adamw"] == pytest.approx(
        figures["loss_distro"] / figures["loss_adamw"]
    )
    assert "compression vs bf16" in text
    # The default format's figures under the issue's keys, v1's beside them, and the bound.
    assert figures["payload_format"] == 2
    v1 = figures["v1"]
    assert v1["compression_ratio_vs_bf16"] < figures["compression_ratio_vs_bf16"]
    assert figures["compression_ratio_vs_bf16"] < figures["entropy_bound_ratio_vs_bf16"]
    assert v1["codec_fraction_of_fwd_bwd"] > 0
    tiny = figures["presets"]["tiny"]
    assert tiny["n_params"] == figures["n_params"]
    assert tiny["v2"]["bytes_per_client_step"] < tiny["v1"]["bytes_per_client_step"]
    assert set(tiny["ns_per_param"]) >= {"encode", "decode", "encode_v1", "decode_v1", "apply"}
