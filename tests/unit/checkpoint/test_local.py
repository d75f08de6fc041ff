"""Local checkpoints: Hugging Face format, sharded, reloadable by transformers, pruned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from psyche.checkpoint.local import (
    CHECKPOINT_META,
    checkpoint_path,
    prune_checkpoints,
    save_checkpoint,
    state_tensors,
)
from psyche.training.hashing import model_hash
from psyche.training.loading import load_model
from psyche.training.presets import PRESETS, write_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("m") / "model"
    write_model_dir(out, preset=PRESETS["tiny"], seed=3)
    return out


def _files(d: Path) -> dict[str, bytes]:
    names = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
    return {n: (d / n).read_bytes() for n in names if (d / n).is_file()}


@pytest.mark.parametrize("max_shard_bytes", [5 << 30, 600_000])
def test_saved_checkpoint_reloads_with_transformers(
    model_dir: Path, tmp_path: Path, max_shard_bytes: int
) -> None:
    model, _ = load_model(model_dir, device="cpu", dtype=torch.float32)
    want = model_hash(model)
    path = save_checkpoint(
        state_tensors(model),
        tmp_path,
        run_id="run",
        step=12,
        files=_files(model_dir),
        meta={"model_hash": want},
        max_shard_bytes=max_shard_bytes,
    )
    assert path == checkpoint_path(tmp_path, "run", 12) == tmp_path / "run-step12"
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shards = sorted({*index["weight_map"].values()})
    n = len(shards)
    assert shards == [f"model-{i:05}-of-{n:05}.safetensors" for i in range(1, n + 1)]
    assert (n == 1) == (max_shard_bytes > 10**9)
    assert (path / "config.json").read_bytes() == (model_dir / "config.json").read_bytes()
    assert (path / "tokenizer.json").is_file()
    assert json.loads((path / CHECKPOINT_META).read_text())["step"] == 12
    again = AutoModelForCausalLM.from_pretrained(path)
    assert model_hash(again) == want
    assert not list(tmp_path.glob(".*tmp"))


def test_keep_steps_keeps_the_newest(tmp_path: Path) -> None:
    for step in (3, 10, 7, 12):
        (tmp_path / f"run-step{step}").mkdir()
    (tmp_path / "other-step1").mkdir()
    removed = prune_checkpoints(tmp_path, "run", 2)
    assert sorted(p.name for p in removed) == ["run-step3", "run-step7"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-step1", "run-step10", "run-step12"]
    assert prune_checkpoints(tmp_path, "run", 0) == []


def test_config_is_required(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"config\.json"):
        save_checkpoint({}, tmp_path, run_id="r", step=1, files={})
