"""A rank's compute copy of the canonical model: built from its class and config, no weights.

Workers never load a checkpoint. Rank 0 sends a `ModelSpec` (the model class, its config and the
name, shape, dtype and trainability of every parameter and buffer), each rank builds the module
on the meta device (no memory, no random init), materialises it uninitialised on its own device,
fixes the dtypes to the canonical ones (a checkpoint may mix bf16 weights with fp32 rotary
buffers, which a plain `Module.to(dtype)` would not reproduce) and, with TP, shards it. The values
arrive by the weight sync that starts every step (`step.sync_weights`), so a replica never
computes with anything but rank 0's current weights, and no checkpoint bytes cross processes.

The spec is checked against what the class builds, so a config that does not reproduce the
canonical model's tensors fails at startup with the names that differ.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh

from psyche.training.parallel.tp_plan import apply_tensor_parallel

__all__ = ["ModelSpec", "TensorEntry", "build_replica", "sync_names", "trainable_names"]


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One parameter or buffer of the canonical model."""

    name: str
    is_parameter: bool
    shape: tuple[int, ...]
    dtype: torch.dtype
    requires_grad: bool


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What a worker needs to build a replica; picklable (the class travels by reference)."""

    model_class: type[torch.nn.Module]
    config: Any
    tensors: tuple[TensorEntry, ...]

    @classmethod
    def of(cls, model: torch.nn.Module) -> ModelSpec:
        config = getattr(model, "config", None)
        if config is None:
            raise ValueError(
                f"parallel training needs a transformers model with a .config; "
                f"got {type(model).__name__}"
            )
        entries = [
            TensorEntry(n, True, tuple(p.shape), p.dtype, p.requires_grad)
            for n, p in model.named_parameters()
        ] + [
            TensorEntry(n, False, tuple(b.shape), b.dtype, False) for n, b in model.named_buffers()
        ]
        return cls(type(model), config, tuple(sorted(entries, key=lambda e: e.name)))


def trainable_names(spec: ModelSpec) -> tuple[str, ...]:
    """Parameters that get gradients, in ascending name order (the order DisTrO uses)."""
    return tuple(e.name for e in spec.tensors if e.is_parameter and e.requires_grad)


def sync_names(spec: ModelSpec) -> tuple[str, ...]:
    """Every tensor the weight sync copies (all parameters and buffers), in name order."""
    return tuple(e.name for e in spec.tensors)


def _fix_dtypes(model: torch.nn.Module, spec: ModelSpec) -> None:
    entries = {e.name: e for e in spec.tensors}
    for module_name, module in model.named_modules():
        prefix = f"{module_name}." if module_name else ""
        for name, param in list(module._parameters.items()):
            entry = entries.get(prefix + name)
            if param is not None and entry is not None:
                if param.dtype != entry.dtype:
                    param = torch.nn.Parameter(torch.empty_like(param, dtype=entry.dtype))
                    module._parameters[name] = param
                param.requires_grad_(entry.requires_grad)
        for name, buf in list(module._buffers.items()):
            entry = entries.get(prefix + name)
            if buf is not None and entry is not None and buf.dtype != entry.dtype:
                module._buffers[name] = torch.empty_like(buf, dtype=entry.dtype)


def _check_matches(model: torch.nn.Module, spec: ModelSpec) -> None:
    built = {n: (True, tuple(t.shape), t.dtype) for n, t in model.named_parameters()} | {
        n: (False, tuple(t.shape), t.dtype) for n, t in model.named_buffers()
    }
    wanted = {e.name: (e.is_parameter, e.shape, e.dtype) for e in spec.tensors}
    if built != wanted:
        differ = sorted(n for n in built.keys() | wanted.keys() if built.get(n) != wanted.get(n))
        raise ValueError(
            f"{spec.model_class.__name__} built from the canonical model's config does not "
            f"reproduce its tensors; differing: {', '.join(differ[:8])}"
        )


def build_replica(
    spec: ModelSpec, device: torch.device, tp_mesh: DeviceMesh | None
) -> torch.nn.Module:
    """An uninitialised replica on `device`, sharded over `tp_mesh` when one is given."""
    with torch.device("meta"):
        # A copy: rank 0 builds its TP replica from the canonical model's own config object,
        # which model constructors may annotate.
        model = spec.model_class(copy.deepcopy(spec.config))
    model.to_empty(device=device)
    _fix_dtypes(model, spec)
    tie = getattr(model, "tie_weights", None)
    if callable(tie):
        # Materialising and retyping replace parameters module by module, which unties shared
        # weights (a tied embedding and LM head would become two tensors).
        tie()
    _check_matches(model, spec)
    model.train()
    if tp_mesh is not None and tp_mesh.size() > 1:
        apply_tensor_parallel(model, tp_mesh)
    return model
