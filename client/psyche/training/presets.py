"""Randomly initialised Llama models of fixed shapes, written as ordinary HF checkpoints.

Tests and demos need a model that exists without a download; `write_model_dir` creates one that
every other code path (Hub loading, P2P sharing, checkpoints) treats like a real checkpoint.

Initialisation is a pure function of (preset, seed, dtype): torch's CPU generator is seeded inside
`torch.random.fork_rng`, so the caller's RNG state is untouched and the same seed always gives the
same weights, the same safetensors bytes and the same `model_hash`.

Shapes (vocab 264 = 256 bytes + BOS/EOS/PAD padded to a multiple of 8; untied embeddings; MHA;
SwiGLU MLP; the parameter counts are exact):

    preset  hidden  layers  heads  head_dim  mlp   seq  parameters
    tiny       128       2      4        32  1280  128   1,182,336
    small      256       8      8        32  1280  256  10,100,992
    medium     512      12      8        64  2048  512  50,614,784
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from psyche.training.hashing import model_hash
from psyche.training.tokenizer import (
    BOS_ID,
    BYTE_TOKENS,
    EOS_ID,
    PAD_ID,
    byte_tokenizer,
    padded_vocab_size,
)

__all__ = [
    "BYTE_VOCAB_SIZE",
    "PRESETS",
    "InitResult",
    "Preset",
    "init_model",
    "llama_config",
    "write_model_dir",
]

BYTE_VOCAB_SIZE = padded_vocab_size(BYTE_TOKENS + 3)
"""Embedding rows of byte-vocabulary models: 256 bytes + 3 specials, padded to 264."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    """The shape of a Llama model; the vocabulary is chosen separately."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    max_seq_len: int
    num_kv_heads: int | None = None
    """Key/value heads for grouped-query attention; None means one per attention head."""


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        hidden_size=128, intermediate_size=1280, num_layers=2, num_heads=4, max_seq_len=128
    ),
    "small": Preset(
        hidden_size=256, intermediate_size=1280, num_layers=8, num_heads=8, max_seq_len=256
    ),
    "medium": Preset(
        hidden_size=512, intermediate_size=2048, num_layers=12, num_heads=8, max_seq_len=512
    ),
}


def llama_config(preset: Preset, vocab_size: int = BYTE_VOCAB_SIZE) -> LlamaConfig:
    """A `LlamaConfig` of `preset`'s shape with the byte tokenizer's special-token ids."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_hidden_layers=preset.num_layers,
        num_attention_heads=preset.num_heads,
        num_key_value_heads=preset.num_kv_heads or preset.num_heads,
        max_position_embeddings=preset.max_seq_len,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
    )


def init_model(
    config: LlamaConfig, seed: int, dtype: torch.dtype = torch.float32
) -> LlamaForCausalLM:
    """A freshly initialised model on CPU; deterministic in (config, seed, dtype)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    torch.nn.Module.to(model, dtype)  # in place; transformers' typed `to` wrapper confuses mypy
    return model


@dataclass(frozen=True, slots=True)
class InitResult:
    """What `write_model_dir` produced."""

    path: Path
    n_params: int
    model_hash: str


def write_model_dir(
    out: Path,
    *,
    preset: Preset,
    seed: int,
    dtype: torch.dtype = torch.float32,
    overwrite: bool = False,
) -> InitResult:
    """Write config.json, model.safetensors, generation_config.json and the byte tokenizer.

    Refuses a directory that already holds a config.json unless `overwrite` is set, so an existing
    checkpoint is never replaced by accident.
    """
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if (out / "config.json").exists() and not overwrite:
        raise FileExistsError(f"{out} already holds a model (config.json)")
    config = llama_config(preset)
    model = init_model(config, seed, dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # safetensors: the default, and the only format we load
    byte_tokenizer(preset.max_seq_len).save_pretrained(out)
    # Readers of a run config see the seed and preset next to the weights they produced.
    (out / "psyche_init.json").write_text(
        json.dumps({"seed": seed, "dtype": str(dtype).removeprefix("torch."), **_shape(preset)})
        + "\n"
    )
    n_params = sum(p.numel() for p in model.parameters())
    return InitResult(path=out, n_params=n_params, model_hash=model_hash(model))


def _shape(preset: Preset) -> dict[str, int | None]:
    return {
        "hidden_size": preset.hidden_size,
        "intermediate_size": preset.intermediate_size,
        "num_layers": preset.num_layers,
        "num_heads": preset.num_heads,
        "num_kv_heads": preset.num_kv_heads,
        "max_seq_len": preset.max_seq_len,
    }
