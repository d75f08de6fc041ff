"""Run configs for end-to-end tests: config/tiny with overrides, a model and data made once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "config" / "tiny"


@pytest.fixture(scope="session")
def local_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny model directory and token data, shared by every end-to-end test."""
    from psyche.data.prepare import ByteTokenizer, prepare_corpus
    from psyche.data.synth import synth_corpus
    from psyche.training.presets import PRESETS, write_model_dir

    base = tmp_path_factory.mktemp("inputs")
    write_model_dir(base / "model", preset=PRESETS["tiny"], seed=0)
    synth_corpus(base / "text", 200_000, seed=0)
    prepare_corpus([base / "text"], ByteTokenizer(), base / "data", seq_len=64)
    return base / "model", base / "data"


def write_run_dir(
    out: Path, inputs: tuple[Path, Path], *, data_port: int, base: Path = TINY, **config: int
) -> Path:
    """config/tiny (or ``base``, a config of the same model and data server, e.g.
    config/tiny-sparseloco) with ``[config]`` overrides, the shared inputs and its own data
    port."""
    model, data = inputs
    text = (base / "state.toml").read_text()
    head, sep, tail = text.partition("[model.LLM]")
    for key, value in config.items():
        head, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", head)
        assert n == 1, key
    text = head + sep + tail
    text = text.replace('repo_id = "runs/tiny/model"', f'repo_id = "{model}"')
    text = text.replace('Server = "127.0.0.1:20001"', f'Server = "127.0.0.1:{data_port}"')
    out.mkdir(parents=True, exist_ok=True)
    (out / "state.toml").write_text(text)
    data_toml = (TINY / "data.toml").read_text()
    data_toml = re.sub(r"(?m)^dir = .*$", f'dir = "{data}"', data_toml)
    (out / "data.toml").write_text(data_toml)
    return out
