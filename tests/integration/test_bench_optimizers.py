"""`bench/optimizers.py` end to end: a short three-arm run writes the issue's figures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "optimizers.py"
KEYS = (
    "loss_ratio_multistep_over_adamw",
    "loss_ratio_multistep_over_distro",
    "bytes_per_token_distro_over_multistep",
    "apply_over_matmul_decode",
    "codec_fraction_of_fwd_bwd",
    "codec_fraction_of_round",
    "loss_ratio_distro_over_adamw",
)
LIMIT_S = 240


@pytest.mark.slow
def test_short_run_writes_every_figure(
    tmp_path: Path, reap_children: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out.json"
    # 12 steps: the third round's encode is the first whose LR fell since the round before,
    # so --error-lr-scale and --outer-lr-final (sweep arms) change something.
    cmd = [sys.executable, str(SCRIPT), "--quick", "--steps", "12", "--inner-steps", "4"]
    cmd += ["--clients", "2", "--batch-per-client", "1", "--val-samples", "4", "--evals", "1"]
    cmd += ["--codec-samples", "2", "--apply-repeat", "1", "--threads", "1", "--json", str(out)]
    cmd += ["--error-lr-scale", "--outer-lr-final", "2", "--final-lr-fraction", "0.05"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reap_children.append(proc)
    stdout, _ = proc.communicate(timeout=LIMIT_S)
    assert proc.returncode == 0, stdout.decode(errors="replace")
    fig = json.loads(out.read_text())
    for key in KEYS:
        value = fig[key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
    assert fig["sparseloco_bytes_per_client_round"] == fig["sparseloco_max_payload_bytes"]
    assert fig["sparseloco_model_hash"] and fig["distro_model_hash"]
    assert fig["sparseloco"]["error_lr_scale"] is True
    assert fig["sparseloco"]["outer_lr_final"] == 2.0 and fig["final_lr_fraction"] == 0.05
    assert fig["bytes_per_token_distro_over_multistep"] == pytest.approx(
        fig["distro_bytes_per_token"] / fig["sparseloco_bytes_per_token"]
    )
    assert fig["loss_ratio_multistep_over_adamw"] == pytest.approx(
        fig["final_val_loss"]["sparseloco"] / fig["final_val_loss"]["adamw"]
    )


def test_bad_flag_answers_with_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "10", "--inner-steps", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "multiple of --inner-steps" in proc.stderr
    assert "Traceback" not in proc.stderr
