"""The model and token files a local run config points at, made locally when missing.

Local testnets never download anything: a model directory named by a relative Hub repo id
(``runs/tiny/model``) is written from the tiny preset, and token files are prepared from a
synthetic corpus, for a ``Server`` location (the directory of the config's ``data.toml``, which
the server serves) or a ``Local`` one (the directory the clients read themselves).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from psyche.protocol.locations import HubCheckpoint, LocalData, ServerData
from psyche.protocol.model import LLM
from psyche.protocol.run_file import RunConfig, load_data_config, load_run_config

__all__ = ["prepare_local_inputs", "state_with_checkpoint"]

SYNTH_BYTES = 400_000
DEFAULT_SHUFFLE_SEED = bytes(range(1, 33))
"""config/tiny's data.toml seed, so a Local copy of the tiny run reads the same batches."""


def prepare_local_inputs(run: RunConfig, config_path: Path, log: Callable[[str], None]) -> None:
    """Create the model directory and token files a local run config points at, if missing."""
    llm = run.model
    assert isinstance(llm, LLM)
    ck = llm.checkpoint
    if isinstance(ck, HubCheckpoint) and ck.repo.revision is None:
        model_dir = Path(ck.repo.repo_id)
        looks_local = ck.repo.repo_id.startswith((".", "/", "runs/")) or model_dir.exists()
        if looks_local and not (model_dir / "config.json").exists():
            from psyche.training.presets import PRESETS, write_model_dir

            res = write_model_dir(model_dir, preset=PRESETS["tiny"], seed=0)
            log(f"created a tiny model ({res.n_params:,} parameters) in {model_dir}")
    data_toml = config_path / "data.toml"
    loc = llm.data_location
    if isinstance(loc, ServerData) and data_toml.exists():
        dc = load_data_config(data_toml)
        _prepare(dc.resolved_dir(data_toml), dc.seq_len, bytes(dc.shuffle_seed), log)
    elif isinstance(loc, LocalData) and not Path(loc.path).is_file():
        # A Local path is read by every client from its own working directory (here: ours).
        _prepare(Path(loc.path), llm.max_seq_len, DEFAULT_SHUFFLE_SEED, log)


def _prepare(data_dir: Path, seq_len: int, seed: bytes, log: Callable[[str], None]) -> None:
    if data_dir.exists() and any(data_dir.glob("*.npy")):
        return
    from psyche.data.prepare import ByteTokenizer, prepare_corpus
    from psyche.data.synth import synth_corpus

    text = data_dir.parent / (data_dir.name + "-text")
    synth_corpus(text, SYNTH_BYTES, seed=0)
    prepare_corpus([text], ByteTokenizer(), data_dir, seq_len=seq_len, shuffle_seed=seed)
    log(f"created synthetic token data in {data_dir}")


def state_with_checkpoint(state_toml: Path, repo: str, out: Path) -> Path:
    """``--first-client-checkpoint``: a copy of ``state_toml`` in ``out`` whose model checkpoint
    is the Hugging Face repo ``repo`` (``owner/name``, ``owner/name@revision``, or a local model
    directory), so the first clients load the model and its config from there. Checked by
    loading it back: a bad repo id fails here, before anything starts."""
    name, _, revision = repo.partition("@")
    lines = state_toml.read_text().splitlines()
    kept: list[str] = []
    skipping = False
    for line in lines:
        header = line.strip()
        if header.startswith("["):
            skipping = header.startswith("[model.LLM.checkpoint")
        if not skipping:
            kept.append(line)
    table = ["[model.LLM.checkpoint.Hub]", f"repo_id = {_toml_string(name)}"]
    if revision:
        table.append(f"revision = {_toml_string(revision)}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "state.toml"
    path.write_text("\n".join([*kept, "", *table]) + "\n")
    run = load_run_config(path)
    llm = run.model
    if not isinstance(llm, LLM) or not isinstance(llm.checkpoint, HubCheckpoint):
        raise ValueError(f"{state_toml}: --first-client-checkpoint needs an LLM model")
    return path


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
