"""Fixtures of the training tests: a tiny model in memory and one written to disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import LlamaForCausalLM

from psyche.training import init_model, llama_config, write_model_dir

from .helpers import TINY


@pytest.fixture
def tiny_model() -> LlamaForCausalLM:
    return init_model(llama_config(TINY), seed=0)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory written once per module (seed 0); tests must not modify it."""
    out = tmp_path_factory.mktemp("tiny") / "model"
    write_model_dir(out, preset=TINY, seed=0)
    return out
