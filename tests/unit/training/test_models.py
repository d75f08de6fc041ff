"""Model creation and loading: presets, byte tokenizer, local/sharded/Hub/P2P loading, the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file
from transformers import LlamaForCausalLM, PreTrainedModel

from psyche.cli.model import model_group
from psyche.data.prepare import ByteTokenizer
from psyche.protocol.locations import HubCheckpoint, HubRepo, P2PCheckpoint
from psyche.protocol.model import LLMArchitecture
from psyche.training import (
    BYTE_VOCAB_SIZE,
    PRESETS,
    ModelLoadError,
    byte_tokenizer,
    checkpoint_dtype,
    llama_config,
    load_model,
    model_config_json,
    model_from_state_dict,
    model_hash,
    write_model_dir,
)

from .helpers import CPU, TINY

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _load(source: object) -> PreTrainedModel:
    model, _ = load_model(source, device=CPU, dtype=torch.float32)  # type: ignore[arg-type]
    return model


# --- presets ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"), [("tiny", 1_182_336), ("small", 10_100_992), ("medium", 50_614_784)]
)
def test_preset_parameter_counts_match_the_documented_shapes(name: str, params: int) -> None:
    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(PRESETS[name]))
    assert sum(p.numel() for p in model.parameters()) == params
    assert model.config.vocab_size == BYTE_VOCAB_SIZE == 264


def test_same_seed_gives_same_bytes_and_hash_other_seed_differs(tmp_path: Path) -> None:
    a = write_model_dir(tmp_path / "a", preset=TINY, seed=7)
    b = write_model_dir(tmp_path / "b", preset=TINY, seed=7)
    c = write_model_dir(tmp_path / "c", preset=TINY, seed=8)
    assert a.model_hash == b.model_hash != c.model_hash
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    names = {p.name for p in (tmp_path / "a").iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json"} <= names
    assert {"tokenizer.json", "tokenizer_config.json"} <= names


def test_init_does_not_disturb_the_callers_rng(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    write_model_dir(tmp_path / "m", preset=TINY, seed=1)
    assert torch.equal(torch.rand(3), expected)


def test_existing_model_is_not_overwritten_without_permission(tiny_dir: Path) -> None:
    with pytest.raises(FileExistsError):
        write_model_dir(tiny_dir, preset=TINY, seed=1)


# --- tokenizer ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["", "hello", "héllo wörld\n\t日本 🎉", "<|eos|> stays bytes", "\x00\x7f"]
)
def test_byte_tokenizer_round_trips_and_matches_the_data_tokenizer(text: str) -> None:
    tok = byte_tokenizer(32)
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == list(text.encode("utf-8"))
    assert ids == ByteTokenizer().encode(text).tolist()
    assert tok.decode(ids) == text
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (256, 257, 258)
    assert len(tok) == 259


def test_saved_tokenizer_reloads_with_the_model(tiny_dir: Path) -> None:
    _, tok = load_model(tiny_dir, device=CPU, dtype=torch.float32)
    assert tok is not None
    text = "bytes → ids"
    assert tok.encode(text, add_special_tokens=False) == list(text.encode())


# --- local directories --------------------------------------------------------------------------


def test_reload_from_directory_is_bit_identical(tiny_dir: Path) -> None:
    expected = json.loads((tiny_dir / "config.json").read_text())
    model = _load(tiny_dir)
    tensors = load_file(tiny_dir / "model.safetensors")
    assert model_hash(model) == model_hash(_load(str(tiny_dir)))
    assert model.config.hidden_size == expected["hidden_size"]
    assert all(torch.equal(p, tensors[n]) for n, p in model.named_parameters())


def test_sharded_checkpoint_loads_to_the_same_weights(tiny_dir: Path, tmp_path: Path) -> None:
    model = _load(tiny_dir)
    model.save_pretrained(tmp_path, max_shard_size="200KB")
    shards = sorted(tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "model.safetensors.index.json").is_file()
    assert model_hash(_load(tmp_path)) == model_hash(model)


def test_bf16_load_casts_the_weights(tiny_dir: Path) -> None:
    model, _ = load_model(tiny_dir, device=CPU, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_checkpoint_dtype_is_what_the_weights_are_stored_in(tiny_dir: Path, tmp_path: Path) -> None:
    """Every client of a run holds the weights in the checkpoint's dtype, whatever its device
    (daemon.loader): read from the safetensors, not from config.json."""
    assert checkpoint_dtype(tiny_dir) == torch.float32
    write_model_dir(tmp_path / "bf16", preset=TINY, seed=0, dtype=torch.bfloat16)
    assert checkpoint_dtype(tmp_path / "bf16") == torch.bfloat16
    shutil.copytree(tiny_dir, tmp_path / "claims")
    config = json.loads((tmp_path / "claims" / "config.json").read_text())
    config["dtype"] = config["torch_dtype"] = "bfloat16"
    (tmp_path / "claims" / "config.json").write_text(json.dumps(config))
    assert checkpoint_dtype(tmp_path / "claims") == torch.float32
    (tmp_path / "claims" / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ModelLoadError, match="header"):
        checkpoint_dtype(tmp_path / "claims")


@pytest.mark.parametrize("remove", ["config.json", "model.safetensors"])
def test_incomplete_directory_is_refused(tiny_dir: Path, tmp_path: Path, remove: str) -> None:
    shutil.copytree(tiny_dir, tmp_path / "m")
    (tmp_path / "m" / remove).unlink()
    with pytest.raises(ModelLoadError, match=remove.split(".")[-1]):
        _load(tmp_path / "m")


def test_weights_that_do_not_match_the_config_are_refused(tiny_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny_dir, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="missing_keys"):
        _load(tmp_path / "m")


def test_llama_architecture_refuses_other_model_types(tiny_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny_dir, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["model_type"] = "mistral"
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="HfAuto"):
        _load(tmp_path / "m")
    with pytest.raises(ModelLoadError, match="Torchtitan"):
        load_model(
            tiny_dir, device=CPU, dtype=torch.float32, architecture=LLMArchitecture.Torchtitan
        )


# --- the Hub, offline ---------------------------------------------------------------------------


@pytest.fixture
def hub_cache(tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An HF cache holding org/tiny at COMMIT (refs/main points at it), with the Hub offline."""
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for file in tiny_dir.iterdir():
        shutil.copy(file, snapshot / file.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hub"


@pytest.mark.parametrize(
    "source",
    [
        HubRepo(repo_id="org/tiny"),
        HubRepo(repo_id="org/tiny", revision=COMMIT),
        HubCheckpoint(HubRepo(repo_id="org/tiny", revision="main")),
    ],
)
def test_hub_checkpoint_loads_offline_from_the_cache(
    hub_cache: Path, tiny_dir: Path, source: object
) -> None:
    model, tok = load_model(source, device=CPU, dtype=torch.float32)  # type: ignore[arg-type]
    assert model_hash(model) == model_hash(_load(tiny_dir))
    assert tok is not None


def test_hub_repo_missing_from_the_offline_cache_is_a_clear_error(hub_cache: Path) -> None:
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE"):
        _load(HubCheckpoint(HubRepo(repo_id="org/absent")))


def test_hub_checkpoint_naming_a_local_directory_loads_it(tiny_dir: Path) -> None:
    model = _load(HubCheckpoint(HubRepo(repo_id=str(tiny_dir))))
    assert model_hash(model) == model_hash(_load(tiny_dir))


def test_p2p_checkpoint_is_not_loaded_from_files(tiny_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="P2P"):
        _load(P2PCheckpoint(HubRepo(repo_id=str(tiny_dir))))


# --- P2P: config JSON + tensors -----------------------------------------------------------------


def test_model_from_state_dict_rebuilds_the_same_model(tiny_dir: Path) -> None:
    source, _ = load_model(tiny_dir, device=CPU, dtype=torch.bfloat16)
    tensors = {n: p.detach().clone() for n, p in source.named_parameters()}
    model = model_from_state_dict(model_config_json(source), tensors)
    assert model.dtype == torch.bfloat16
    assert model_hash(model) == model_hash(source)
    logits = model(input_ids=torch.tensor([[3, 4, 5]])).logits
    assert logits.shape == (1, 3, BYTE_VOCAB_SIZE)


def test_model_from_state_dict_refuses_incomplete_or_bad_input(tiny_dir: Path) -> None:
    source = _load(tiny_dir)
    config = model_config_json(source)
    tensors = dict(source.named_parameters())
    with pytest.raises(ModelLoadError, match="missing_keys"):
        model_from_state_dict(config, {k: v for k, v in tensors.items() if k != "lm_head.weight"})
    with pytest.raises(ModelLoadError, match="JSON"):
        model_from_state_dict("{not json", tensors)
    with pytest.raises(ModelLoadError, match="model_type"):
        model_from_state_dict("[]", tensors)


# --- CLI ----------------------------------------------------------------------------------------


def test_cli_init_writes_a_loadable_model_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    runner = CliRunner()
    result = runner.invoke(model_group, ["init", "--preset", "tiny", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "1,182,336" in result.output
    model = _load(out)
    assert model_hash(model) in result.output.replace("\n", "")
    again = runner.invoke(model_group, ["init", "--preset", "tiny", "--out", str(out)])
    assert again.exit_code != 0 and "--force" in again.output


def test_concurrent_loads_leave_transformers_init_and_tying_intact(tmp_path: Path) -> None:
    """transformers swaps process-wide functions for no-ops while it loads (weight init, weight
    tying) and restores them after; loads in several threads at once (the simulated run's
    clients) used to interleave those swaps and leave the no-ops installed, so every model made
    afterwards had NaN weights and untied embeddings. Loads are serialised now."""
    import threading

    from psyche.training import PRESETS, init_model, llama_config, load_model, write_model_dir

    write_model_dir(tmp_path / "m", preset=PRESETS["tiny"], seed=0)
    errors: list[BaseException] = []

    def load() -> None:
        try:
            for _ in range(3):
                load_model(tmp_path / "m", device="cpu", dtype=torch.float32)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    config = llama_config(PRESETS["tiny"])
    config.tie_word_embeddings = True
    model = init_model(config, 0)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert PreTrainedModel.tie_weights.__name__ == "tie_weights"
