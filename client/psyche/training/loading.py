"""Build a model (and its tokenizer) from a local directory, the Hugging Face Hub, or raw tensors.

All sources end in one loader, so a Hub download, a checkpoint written by a peer at cooldown and a
model from `psyche model init` are read by exactly the same code:

- a local HF-format directory: config.json plus model.safetensors, or shards with
  model.safetensors.index.json;
- the Hub (`HubRepo`/`HubCheckpoint`): as the reference, a `repo_id` that names an existing
  directory with no revision is that directory; anything else is fetched with
  `snapshot_download` into the HF cache and loaded from the snapshot;
- `model_from_state_dict`: a config JSON and tensors received over P2P (docs/protocol.md,
  "P2P model sharing").

Safety and strictness, since checkpoints may come from untrusted peers (docs/protocol.md,
"Known flaws of the reference", flaw 4):

- only safetensors are read (never pickle-based `pytorch_model.bin`), and no repository code is
  downloaded or run (`*.py` is not fetched, `trust_remote_code` is never set);
- the weights must match the config exactly: a missing, unexpected or mis-shaped tensor is an
  error, where transformers alone would silently initialise the gap at random and let this
  client diverge from its peers.

huggingface_hub reads `HF_HUB_CACHE` and `HF_HUB_OFFLINE` once at import, so this module reads the
environment at call time and passes `cache_dir`/`local_files_only` explicitly: a test (or a CLI
flag's environment twin) that sets them later is still honoured.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from psyche.protocol.locations import Checkpoint, HubCheckpoint, HubRepo
from psyche.protocol.model import LLMArchitecture
from psyche.training.errors import ModelLoadError

__all__ = [
    "HUB_ALLOW_PATTERNS",
    "checkpoint_dtype",
    "download_hub_snapshot",
    "load_model",
    "model_config_json",
    "model_from_state_dict",
    "resolve_checkpoint_dir",
]

log = logging.getLogger(__name__)

HUB_ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model-*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
]
"""What a Hub download fetches: the config, safetensors weights and tokenizer files only."""

_TRUE = {"1", "true", "yes", "on"}

Source = str | os.PathLike[str] | HubRepo | Checkpoint


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _env_cache_dir() -> str | None:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None


def download_hub_snapshot(
    repo_id: str,
    revision: str | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    token: str | None = None,
    offline: bool | None = None,
) -> Path:
    """Fetch (or find in the cache) `repo_id`@`revision` and return the snapshot directory.

    Defaults come from the environment at call time: `HF_HUB_CACHE` (or `HF_HOME`/hub),
    `HF_TOKEN`, and `HF_HUB_OFFLINE` (cache only, no network).
    """
    cache = str(cache_dir) if cache_dir is not None else _env_cache_dir()
    local_only = _env_flag("HF_HUB_OFFLINE") if offline is None else offline
    where = f"{repo_id}@{revision or 'main'}"
    try:
        path = snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=cache,
            token=token if token is not None else os.environ.get("HF_TOKEN") or None,
            local_files_only=local_only,
            allow_patterns=HUB_ALLOW_PATTERNS,
        )
    except LocalEntryNotFoundError as e:
        hint = "it is not in the HF cache and HF_HUB_OFFLINE is set" if local_only else str(e)
        raise ModelLoadError(f"cannot load {where} from the Hub: {hint} (cache: {cache})") from e
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise ModelLoadError(
            f"cannot download {where} from the Hub: {e}; check the repo id, the revision "
            "and HF_TOKEN for private repos"
        ) from e
    return Path(str(path))


def resolve_checkpoint_dir(source: Source) -> Path:
    """The local directory `source` names, downloading a Hub snapshot when needed."""
    if isinstance(source, HubCheckpoint):
        source = source.repo
    if isinstance(source, HubRepo):
        if source.revision is None and Path(source.repo_id).is_dir():
            return Path(source.repo_id)
        return download_hub_snapshot(source.repo_id, source.revision)
    if isinstance(source, Checkpoint):
        raise ModelLoadError(
            f"a {source.TAG} checkpoint cannot be loaded from files here; Hub checkpoints and "
            "local directories can (P2P models are built with model_from_state_dict)"
        )
    path = Path(source)
    if not path.is_dir():
        raise ModelLoadError(f"model directory {path} does not exist")
    return path


def _model_class(architecture: LLMArchitecture) -> Any:
    if architecture is LLMArchitecture.HfLlama:
        return LlamaForCausalLM
    if architecture in (LLMArchitecture.HfAuto, LLMArchitecture.HfDeepseek):
        return AutoModelForCausalLM
    raise ModelLoadError(
        f"architecture {architecture.value} is not supported; use HfLlama, HfDeepseek or HfAuto"
    )


def _check_loading_info(info: dict[str, Any], where: str) -> None:
    problems = {
        kind: sorted(str(k) for k in info.get(kind) or ())
        for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")
    }
    bad = {kind: keys for kind, keys in problems.items() if keys}
    if bad:
        detail = "; ".join(f"{kind}: {', '.join(keys[:5])}" for kind, keys in bad.items())
        raise ModelLoadError(f"weights in {where} do not match its config ({detail})")


_FROM_PRETRAINED = threading.Lock()
"""One ``from_pretrained`` at a time per process. transformers patches process-wide functions
while it loads (``no_init_weights`` swaps ``torch.nn.init`` and ``PreTrainedModel.init_weights``
for no-ops, ``no_tie_weights`` swaps ``tie_weights``) and restores them on exit; two loads in
two threads (the simulated run's clients, a joiner's P2P build beside an eval) interleave those
swaps and can leave the no-ops installed for good, after which every new model has uninitialised
(NaN) weights and untied embeddings."""


def _finish(model: PreTrainedModel, device: torch.device | str) -> PreTrainedModel:
    # Module.to moves parameters in place; transformers' typed wrapper of `to` confuses mypy.
    torch.nn.Module.to(model, torch.device(device))
    model.train()
    return model


def load_model(
    source: Source,
    *,
    device: torch.device | str,
    dtype: torch.dtype,
    architecture: LLMArchitecture = LLMArchitecture.HfLlama,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase | None]:
    """Load a causal LM as `dtype` on `device`, and its tokenizer if the checkpoint has one.

    `source` is a local directory, a `HubRepo` or a `HubCheckpoint` (see module doc).
    """
    path = resolve_checkpoint_dir(source)
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} has no config.json; is it a Hugging Face model directory?")
    if not any(path.glob("*.safetensors")):
        raise ModelLoadError(
            f"{path} has no *.safetensors weights (pickle-based weights are not loaded)"
        )
    if architecture is LLMArchitecture.HfLlama:
        model_type = json.loads((path / "config.json").read_text()).get("model_type")
        if model_type != "llama":
            raise ModelLoadError(
                f"{path}/config.json has model_type {model_type!r}, but the run's architecture "
                "is HfLlama; use HfAuto for other model types"
            )
    cls = _model_class(architecture)
    try:
        with _FROM_PRETRAINED:
            model, info = cls.from_pretrained(
                path,
                dtype=dtype,
                use_safetensors=True,
                local_files_only=True,
                output_loading_info=True,
            )
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelLoadError(f"cannot load the model in {path}: {e}") from e
    _check_loading_info(info, str(path))
    return _finish(model, device), _load_tokenizer(path)


_STORED_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def checkpoint_dtype(path: Path) -> torch.dtype:
    """The floating dtype a checkpoint directory's weights are stored in, read from the
    safetensors headers (not from config.json, which may say otherwise): the dtype holding the
    most elements, float32 if none is floating.

    A run's clients hold the weights in this dtype on every device (daemon.loader): honest
    clients must hold the same bits, and a CPU client in float32 beside a GPU client in bfloat16
    would not, whatever the apply does.
    """
    elements: dict[torch.dtype, int] = {}
    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    part = f.get_slice(name)
                    dtype = _STORED_DTYPES.get(part.get_dtype())
                    if dtype is not None:
                        elements[dtype] = elements.get(dtype, 0) + math.prod(part.get_shape())
        except (OSError, ValueError, RuntimeError, SafetensorError) as e:
            raise ModelLoadError(f"cannot read the weights' header in {file}: {e}") from e
    # `max` keeps the first of equals, so ties (and no floating tensor at all) go by the table's
    # order, float32 first: every client picks the same.
    return max(_STORED_DTYPES.values(), key=lambda d: elements.get(d, 0))


def _load_tokenizer(path: Path) -> PreTrainedTokenizerBase | None:
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        return None
    try:
        tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
            path, local_files_only=True
        )
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        # Training needs only token ids; a broken tokenizer must not stop a client.
        log.warning("ignoring the tokenizer in %s: %s", path, e)
        return None
    return tokenizer


def model_config_json(model: PreTrainedModel) -> str:
    """The config a peer needs to rebuild `model` with `model_from_state_dict`."""
    return str(model.config.to_json_string(use_diff=False))


def model_from_state_dict(
    config_json: str,
    tensors: Mapping[str, torch.Tensor],
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> PreTrainedModel:
    """Build a causal LM from a config JSON and its complete set of named tensors (P2P joiners).

    `dtype` defaults to the tensors' dtype (bf16 for models shared at cooldown). The tensor set
    must match the config exactly.
    """
    try:
        raw = json.loads(config_json)
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"model config is not valid JSON: {e}") from e
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        raise ModelLoadError("model config must be a JSON object with a string 'model_type'")
    if not tensors:
        raise ModelLoadError("no tensors given to build the model from")
    try:
        config = AutoConfig.for_model(**raw)
        cls: Any = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except (KeyError, ValueError, TypeError) as e:
        raise ModelLoadError(f"unsupported model config ({raw['model_type']!r}): {e}") from e
    target = dtype if dtype is not None else next(iter(tensors.values())).dtype
    try:
        with _FROM_PRETRAINED:
            model, info = cls.from_pretrained(
                None,
                config=config,
                state_dict=dict(tensors),
                dtype=target,
                output_loading_info=True,
            )
    except (ValueError, KeyError, RuntimeError) as e:
        raise ModelLoadError(f"cannot build the model from the received tensors: {e}") from e
    _check_loading_info(info, "the received tensors")
    return _finish(model, device)
