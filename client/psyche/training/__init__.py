"""The model/training layer: build and load models, run DisTrO train steps, hash weights.

Modules: `presets` (random Llama models for tests and demos) and `tokenizer` (a byte tokenizer that
needs no download), `loading` (local directories, the HF Hub, P2P tensors), `trainer` (the train
step of docs/distro.md, "Train step", around an injected `psyche.distro.Distro`), `schedule` (LR
with the cold-start factor), `hashing` (bit-exact weight hashes), `device` (device, dtype,
determinism), `parallel` (data and tensor parallelism inside one client: `ParallelTrainer`).

Imports only `psyche.protocol` and `psyche.distro` from this package.
"""

from psyche.training.device import DEFAULT_SEED, default_dtype, enable_determinism, pick_device
from psyche.training.errors import (
    ModelLoadError,
    NonFiniteGradient,
    TrainingCancelled,
    TrainingError,
)
from psyche.training.hashing import model_hash, tensors_hash
from psyche.training.loading import (
    checkpoint_dtype,
    download_hub_snapshot,
    load_model,
    model_config_json,
    model_from_state_dict,
    resolve_checkpoint_dir,
)
from psyche.training.parallel import ParallelLayout, ParallelTrainer, build_trainer
from psyche.training.presets import (
    BYTE_VOCAB_SIZE,
    PRESETS,
    InitResult,
    Preset,
    init_model,
    llama_config,
    write_model_dir,
)
from psyche.training.schedule import cold_start_factor, lr_for_step, prev_lr_for_step
from psyche.training.tokenizer import byte_tokenizer
from psyche.training.trainer import StepOptimizer, Trainer, TrainOutput, distro_config

__all__ = [
    "BYTE_VOCAB_SIZE",
    "DEFAULT_SEED",
    "PRESETS",
    "InitResult",
    "ModelLoadError",
    "NonFiniteGradient",
    "ParallelLayout",
    "ParallelTrainer",
    "Preset",
    "StepOptimizer",
    "TrainOutput",
    "Trainer",
    "TrainingCancelled",
    "TrainingError",
    "build_trainer",
    "byte_tokenizer",
    "checkpoint_dtype",
    "cold_start_factor",
    "default_dtype",
    "distro_config",
    "download_hub_snapshot",
    "enable_determinism",
    "init_model",
    "llama_config",
    "load_model",
    "lr_for_step",
    "model_config_json",
    "model_from_state_dict",
    "model_hash",
    "pick_device",
    "prev_lr_for_step",
    "resolve_checkpoint_dir",
    "tensors_hash",
    "write_model_dir",
]
