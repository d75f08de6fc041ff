"""The tensor-parallel plan for Llama-style models, expressed with torch's own TP API.

Megatron-style sharding through `torch.distributed.tensor.parallel.parallelize_module`:

- attention: `q_proj`, `k_proj`, `v_proj` column-wise (each rank gets whole heads, which works
  because transformers' Llama attention reshapes with `-1` heads), `o_proj` row-wise (its output
  is all-reduced back to a replicated hidden state);
- MLP: `gate_proj` and `up_proj` column-wise, `down_proj` row-wise;
- `lm_head` column-wise over the vocabulary with the logits gathered (`output_layouts=
  Replicate()`), so the loss is computed exactly as in an unsharded model. It is left replicated
  when the vocabulary does not divide by the TP degree or when it is tied to the embedding
  (sharding it would shard the embedding too).

Embeddings and norms stay replicated. Their gradients are still correct and identical on every
rank: the column-wise layers' input is a `Replicate` DTensor, whose backward all-reduces the
partial input gradients. No collective is written by hand here.

Heads, key/value heads and the MLP width must divide by the TP degree; `check_tp_compatible` says
which does not before any process is started.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

__all__ = ["apply_tensor_parallel", "check_tp_compatible", "llama_tp_plan"]

_ATTN_COLWISE = ("q_proj", "k_proj", "v_proj")
_MLP_COLWISE = ("gate_proj", "up_proj")


def _config_int(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    if not isinstance(value, int):
        raise ValueError(
            f"tensor parallelism needs a Llama-style config with an integer {name!r}; "
            f"{type(config).__name__} has {value!r}"
        )
    return value


def check_tp_compatible(config: Any, tp: int) -> None:
    """Raise `ValueError` naming the dimension that does not divide by `tp` (nothing for tp=1)."""
    if tp == 1:
        return
    heads = _config_int(config, "num_attention_heads")
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    intermediate = _config_int(config, "intermediate_size")
    for what, value in (
        ("attention heads (num_attention_heads)", heads),
        ("key/value heads (num_key_value_heads)", kv_heads),
        ("MLP width (intermediate_size)", intermediate),
    ):
        if value % tp:
            raise ValueError(
                f"tensor parallelism {tp} does not divide the model's {value} {what}; "
                f"choose a degree that divides {value}"
            )


def _layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(
            f"tensor parallelism supports Llama-style models (model.layers[i].self_attn / .mlp); "
            f"{type(model).__name__} has no model.layers"
        )
    return layers


def _lm_head_shardable(model: torch.nn.Module, tp: int) -> bool:
    head = getattr(model, "lm_head", None)
    if not isinstance(head, torch.nn.Linear) or head.out_features % tp:
        return False
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    return not (isinstance(embed, torch.nn.Embedding) and embed.weight is head.weight)


def llama_tp_plan(model: torch.nn.Module, tp: int) -> dict[str, ParallelStyle]:
    """`parallelize_module`'s plan for `model` (module path → style); checks the shapes first."""
    check_tp_compatible(getattr(model, "config", None), tp)
    plan: dict[str, ParallelStyle] = {}
    for i, layer in enumerate(_layers(model)):
        for block, colwise, rowwise in (
            ("self_attn", _ATTN_COLWISE, "o_proj"),
            ("mlp", _MLP_COLWISE, "down_proj"),
        ):
            part = getattr(layer, block, None)
            for name in (*colwise, rowwise):
                if not isinstance(getattr(part, name, None), torch.nn.Linear):
                    raise ValueError(
                        f"tensor parallelism supports Llama-style models; layer {i} has no "
                        f"{block}.{name} linear layer"
                    )
            for name in colwise:
                plan[f"model.layers.{i}.{block}.{name}"] = ColwiseParallel()
            plan[f"model.layers.{i}.{block}.{rowwise}"] = RowwiseParallel()
    if _lm_head_shardable(model, tp):
        plan["lm_head"] = ColwiseParallel(output_layouts=Replicate())
    return plan


def apply_tensor_parallel(model: torch.nn.Module, tp_mesh: DeviceMesh) -> torch.nn.Module:
    """Shard `model` in place over the 1-D `tp_mesh`; weights are left as they are locally.

    `src_data_rank=None` makes each rank slice its own copy instead of scattering rank 0's: the
    weights are overwritten by the first sync anyway, so a scatter would be wasted traffic.
    """
    plan = llama_tp_plan(model, tp_mesh.size())
    return parallelize_module(model, tp_mesh, plan, src_data_rank=None)
