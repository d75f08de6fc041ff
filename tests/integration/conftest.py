"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from psyche.data.prepare import ByteTokenizer, prepare_corpus
from psyche.data.synth import synth_corpus
from psyche.training import Preset, write_model_dir

SMALL = Preset(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, max_seq_len=64)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A very small random model and a prepared synthetic corpus, made once per session and
    only read by the tests (runs write under their own ``tmp_path``)."""
    root = tmp_path_factory.mktemp("tiny-corpus")
    write_model_dir(root / "model", preset=SMALL, seed=0)
    synth_corpus(root / "text", 30_000, seed=0)
    prepare_corpus([root / "text"], ByteTokenizer(), root / "data", seq_len=64)
    return root / "model", root / "data"
