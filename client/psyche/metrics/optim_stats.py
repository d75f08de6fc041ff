"""Weight, residual and gradient statistics of a client right after a train step.

What they show: the weight norms drift slowly under sign-SGD (every step moves every weight by
±lr or not at all), so a jump means a bad apply; the residual δ is DisTrO's momentum, which grows
until its transmitted top-k balances what the gradients add; the gradient norm is the one
``Distro.generate`` saw before clipping (is clipping active, how often); and the non-finite
fractions must stay 0 (``generate`` refuses a non-finite gradient, so a NaN here came in through
an apply or a load).

Norms are L2 over all values, accumulated in fp32 whatever the parameter dtype, overall and per
kind of parameter (:func:`param_kind`). Keys::

    weight_norm, weight_norm/<kind>, residual_norm, residual_norm/<kind>, grad_norm,
    nonfinite/weights, nonfinite/residual

``residual_*`` and ``grad_norm`` exist only with a :class:`~psyche.distro.Distro` optimizer
(``grad_norm`` once it generated a payload); ``<kind>`` keys only for kinds the model has.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

from psyche.distro import Distro

if TYPE_CHECKING:
    from psyche.training.trainer import StepOptimizer

__all__ = ["KINDS", "optim_stats", "param_kind"]

KINDS = ("attention", "mlp", "embedding", "norm", "other")

_EMBEDDING = ("embed", "lm_head", "wte", "wpe")
_ATTENTION = ("attn", "attention")
_MLP = ("mlp", "ffn", "feed_forward", "experts")


def param_kind(name: str) -> str:
    """``attention``, ``mlp``, ``embedding`` (input embeddings and the output head), ``norm`` or
    ``other``, from a parameter's dotted name (HF Llama and DeepSeek naming, GPT-2's too)."""
    parts = name.lower().split(".")
    owner = parts[-2] if len(parts) > 1 else parts[0]
    # Norms first: attention blocks hold norms of their own (DeepSeek's kv_a_layernorm).
    if "norm" in owner or owner.startswith("ln_"):
        return "norm"
    for kind, marks in (("embedding", _EMBEDDING), ("attention", _ATTENTION), ("mlp", _MLP)):
        if any(mark in part for part in parts for mark in marks):
            return kind
    return "other"


def _norms(
    named: Iterable[tuple[str, torch.Tensor]], key: str, nonfinite_key: str
) -> dict[str, torch.Tensor]:
    """``key``, ``key/<kind>`` and ``nonfinite_key`` (the fraction of NaN and ±inf values) as
    0-d fp32 tensors on the first tensor's device, turned into floats all at once (one device
    sync instead of one per tensor)."""
    by_kind: dict[str, list[torch.Tensor]] = defaultdict(list)
    tensors: list[torch.Tensor] = []
    device: torch.device | None = None
    for name, t in named:
        if device is None:
            device = t.device
        by_kind[param_kind(name)].append(
            torch.linalg.vector_norm(t.detach(), dtype=torch.float32).to(device)
        )
        tensors.append(t)
    if device is None:
        return {}
    kinds = {k: torch.linalg.vector_norm(torch.stack(by_kind[k])) for k in KINDS if k in by_kind}
    total = torch.linalg.vector_norm(torch.stack(list(kinds.values())))
    out = {key: total, **{f"{key}/{k}": v for k, v in kinds.items()}}
    count = sum(t.numel() for t in tensors)
    # A NaN or ±inf anywhere makes the sum of squares NaN or inf, so a finite norm proves every
    # value finite and the element-wise count (a bool tensor per parameter) is skipped.
    if torch.isfinite(total):
        bad = torch.zeros((), device=device)
    else:
        bad = torch.stack([(~torch.isfinite(t.detach())).sum().to(device) for t in tensors]).sum()
    out[nonfinite_key] = bad.float() / count
    return out


@torch.no_grad()
def optim_stats(model: torch.nn.Module, distro: StepOptimizer) -> dict[str, float]:
    """Statistics of ``model``'s weights and ``distro``'s state; call after ``train_step``
    (``generate`` has restored the weights from the lookahead and consumed the gradients).

    Only reads: the weights and the residual are left exactly as they were.
    """
    values = _norms(model.named_parameters(), "weight_norm", "nonfinite/weights")
    grad_norm: float | None = None
    if isinstance(distro, Distro):
        # Distro offers the residual only as a copy (state_dict), a parameter-sized buffer
        # per call; the norms read it in place instead.
        residual = zip(distro.names, distro._residual, strict=True)
        values |= _norms(residual, "residual_norm", "nonfinite/residual")
        grad_norm = distro.last_grad_norm
    out: dict[str, float] = {}
    if values:
        first = next(iter(values.values())).device
        floats = torch.stack([v.to(first) for v in values.values()]).tolist()
        out = {k: float(x) for k, x in zip(values, floats, strict=True)}
    if grad_norm is not None:
        out["grad_norm"] = float(grad_norm)
    return out
