"""Local checkpoints in Hugging Face format: ``{dir}/{run_id}-step{N}/``.

See docs/protocol.md, "Cooldown".

A checkpoint directory holds ``config.json`` (the exact text the run's model came with, so every
checkpoint of a run has the same config), the tokenizer files the model came with, the weights as
safetensors shards of at most 5 GiB named ``model-{i:05}-of-{n:05}.safetensors`` with
``model.safetensors.index.json`` (always, even for one shard, as the reference writes them), and
``psyche_checkpoint.json`` ({run_id, step, epoch, model_hash}). It loads with
``transformers.AutoModelForCausalLM.from_pretrained(dir)`` and with the run's own loader.

Writes go to a temporary sibling directory renamed into place, so a reader (or a client crash)
never sees half a checkpoint. :func:`prune_checkpoints` keeps the newest ``keep`` steps of a run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from psyche.checkpoint.manifest import SHARED_FILES

__all__ = [
    "CHECKPOINT_META",
    "MAX_SHARD_BYTES",
    "checkpoint_path",
    "prune_checkpoints",
    "save_checkpoint",
    "state_tensors",
]

MAX_SHARD_BYTES = 5 << 30
INDEX = "model.safetensors.index.json"
CHECKPOINT_META = "psyche_checkpoint.json"
"""Written next to a checkpoint's weights: which run and step they belong to."""


def checkpoint_path(directory: str | os.PathLike[str], run_id: str, step: int) -> Path:
    return Path(directory) / f"{run_id}-step{step}"


def state_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the state dict, each storage once (tied weights are re-tied by the
    loader): taken at cooldown so saving can go on while the live weights change."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, t in model.state_dict().items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.numel() else (id(t), 0)
        if key in seen:
            continue
        seen.add(key)
        out[name] = t.detach().to("cpu", copy=True).contiguous()
    return out


def _shards(tensors: Mapping[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(tensors):
        t = tensors[name]
        n = t.numel() * t.element_size()
        if shards[-1] and size + n > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += n
    return shards


def save_checkpoint(
    tensors: Mapping[str, torch.Tensor],
    directory: str | os.PathLike[str],
    *,
    run_id: str,
    step: int,
    files: Mapping[str, bytes],
    meta: Mapping[str, object] | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path:
    """Write ``tensors`` (:func:`state_tensors`) as ``{directory}/{run_id}-step{step}/`` and
    return that path. ``files`` holds ``config.json`` (required) and the tokenizer files."""
    if "config.json" not in files:
        raise ValueError("a checkpoint needs the model's config.json")
    final = checkpoint_path(directory, run_id, step)
    # Unique per call, not per process: several clients of one process (the simulated run) may
    # save the same step at once.
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        shards = _shards(tensors, max_shard_bytes)
        weight_map: dict[str, str] = {}
        for i, shard in enumerate(shards, start=1):
            name = f"model-{i:05}-of-{len(shards):05}.safetensors"
            save_file(shard, str(tmp / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (tmp / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        for name in ("config.json", *SHARED_FILES):
            if name in files:
                (tmp / name).write_bytes(files[name])
        info = {"run_id": run_id, "step": step, **(meta or {})}
        (tmp / CHECKPOINT_META).write_text(json.dumps(info) + "\n")
        # Every client given the same --checkpoint-dir saves the same step (bit-identical
        # weights): a copy already there with our model hash is kept, and losing the race to
        # another writer of the same weights is not an error.
        if _same_weights(final, info):
            shutil.rmtree(tmp, ignore_errors=True)
            return final
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            if not _same_weights(final, info):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _same_weights(path: Path, info: Mapping[str, object]) -> bool:
    """``path`` is a complete checkpoint of the same step and model hash as ``info``."""
    if "model_hash" not in info:
        return False
    try:
        meta = json.loads((path / CHECKPOINT_META).read_text())
    except (OSError, ValueError):
        return False
    keys = ("run_id", "step", "model_hash")
    return isinstance(meta, dict) and all(meta.get(k) == info.get(k) for k in keys)


def prune_checkpoints(directory: str | os.PathLike[str], run_id: str, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` step directories of ``run_id``; returns those removed.
    ``keep <= 0`` keeps everything."""
    if keep <= 0:
        return []
    pattern = re.compile(rf"{re.escape(run_id)}-step(\d+)")
    found = []
    root = Path(directory)
    if not root.is_dir():
        return []
    for child in root.iterdir():
        m = pattern.fullmatch(child.name)
        if m and child.is_dir():
            found.append((int(m.group(1)), child))
    found.sort()
    doomed = [path for _, path in found[: max(len(found) - keep, 0)]]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed
