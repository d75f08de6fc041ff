"""A client holds the run's weights in the checkpoint's dtype on every device (daemon.loader).

Before, the dtype followed the device (float32 on CPU, bfloat16 on CUDA), so the CPU and GPU
clients of one run held different bits from the first step: a run mixing them split silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from psyche.daemon.loader import _model_and_files
from psyche.protocol.model import LLM
from psyche.protocol.run_file import load_run_config
from psyche.training import write_model_dir

from ..training.helpers import TINY

CONFIG = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"


@pytest.mark.parametrize("stored", [torch.float32, torch.bfloat16])
def test_a_cpu_client_holds_the_checkpoints_dtype(tmp_path: Path, stored: torch.dtype) -> None:
    write_model_dir(tmp_path / "m", preset=TINY, seed=0, dtype=stored)
    llm = load_run_config(CONFIG).model
    assert isinstance(llm, LLM)
    model, files, _ = _model_and_files(
        llm, None, torch.device("cpu"), lambda _checkpoint: tmp_path / "m"
    )
    assert {p.dtype for p in model.parameters()} == {stored}
    assert "config.json" in files
