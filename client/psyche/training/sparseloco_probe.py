"""The probe of inner step 0: what a SparseLoCo trainer records of it and how a verifier
replays it from the result alone (the layout and positions: ``psyche.distro.audit_probe``;
docs/protocol.md, "SparseLoCo: the inner-step audit")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from psyche.distro.audit_probe import Probe
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training.audit_compare import LinkVerdict, hidden_share, moment_scale, relative_errors

__all__ = ["Probed", "Sampled", "probe_of", "replay_probe", "sample_at"]


class Probed(Protocol):
    """What the probe's replay needs of the verifier's trainer (a SparseLoCoTrainer)."""

    @property
    def params(self) -> Sequence[torch.Tensor]: ...
    @property
    def config(self) -> SparseLoCoOptimizer: ...

    def gradient(self, part: torch.Tensor) -> list[torch.Tensor | None]: ...


Sampled = tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]
"""One parameter at the probed positions: weights, first and second moment, step count."""


def sample_at(
    params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer, at: Sequence[np.ndarray]
) -> list[Sampled]:
    """Each parameter's weights, moments (zeros before AdamW's first step) and step count at
    the positions ``at``, as float32 on the CPU."""
    out = []
    for p, where in zip(params, at, strict=True):
        idx = torch.from_numpy(where).to(p.device)
        st = optimizer.state.get(p, {})
        w, m, v = (
            torch.zeros(len(where)) if t is None else t.reshape(-1)[idx].float().cpu()
            for t in (p.detach(), st.get("exp_avg"), st.get("exp_avg_sq"))
        )
        step = st.get("step")
        out.append((w, m, v, 0.0 if step is None else float(step)))
    return out


def probe_of(before: Sequence[Sampled], after: Sequence[Sampled]) -> Probe:
    """The probe from :func:`sample_at` of S_0 and of S_1: S_0's step counts and moments, S_1's
    weights and moments."""
    rows = [
        torch.stack([m0, v0, w1, m1, v1]).numpy()
        for (_, m0, v0, _), (w1, m1, v1, _) in zip(before, after, strict=True)
    ]
    return Probe(np.array([t for *_, t in before], np.float32), tuple(rows))


def replay_probe(
    trainer: Probed, probe: Probe, at: Sequence[np.ndarray], part: torch.Tensor, lr: float
) -> LinkVerdict:
    """Inner step 0 at the probe's positions ``at`` alone: the gradient of ``part`` (the first
    inner batch) at the verifier's own weights — the round's public start weights, S_0's —
    then AdamW from the probe's moments before the step, compared with its values after it as
    :func:`replay_link` compares whole states. Needs nothing from the trainer but its result."""
    grads = trainer.gradient(part)
    c = trainer.config
    slices, before = [], []
    for i, (p, where) in enumerate(zip(trainer.params, at, strict=True)):
        # In the weights' own dtype, as the trainer stepped them (a bfloat16 step rounds).
        idx = torch.from_numpy(where)
        w0 = p.detach().reshape(-1).to("cpu").index_select(0, idx)
        m0, v0 = (torch.from_numpy(probe.rows[i][r].copy()).to(w0.dtype) for r in (0, 1))
        before.append((w0.clone(), m0, v0))
        w = torch.nn.Parameter(w0)
        g = grads[i]
        if g is not None:
            w.grad = g.reshape(-1).to("cpu", w0.dtype).index_select(0, idx)
        slices.append(w)
    # The trainer's inner optimizer (foreach=False), on the probed values only: AdamW is
    # elementwise once the gradient is known (the clip, which is not, used the whole gradient).
    opt = torch.optim.AdamW(
        slices, lr=lr, betas=c.betas, eps=c.eps, weight_decay=c.weight_decay, foreach=False
    )
    for i, w in enumerate(slices):
        count = float(probe.counts[i])
        if count != 0.0:
            opt.state[w] = {
                "step": torch.tensor(count, dtype=torch.float32),
                "exp_avg": before[i][1].clone(),
                "exp_avg_sq": before[i][2].clone(),
            }
    opt.step()
    replayed: dict[str, torch.Tensor] = {}
    committed: dict[str, torch.Tensor] = {}
    start: dict[str, torch.Tensor] = {}
    for i, w in enumerate(slices):
        st = opt.state.get(w, {})
        zeros = torch.zeros_like(w.detach())
        replayed |= {
            f"w.{i}": w.detach(),
            f"m.{i}": st.get("exp_avg", zeros),
            f"v.{i}": st.get("exp_avg_sq", zeros),
        }
        w1, m1, v1 = (torch.from_numpy(probe.rows[i][r].copy()) for r in (2, 3, 4))
        committed |= {f"w.{i}": w1, f"m.{i}": m1, f"v.{i}": v1}
        w0, m0, v0 = before[i]
        start |= {f"w.{i}": w0, f"m.{i}": m0, f"v.{i}": v0}
    dtype = slices[0].dtype
    weight, moments = relative_errors(replayed, committed, start, len(slices), c.betas, dtype)
    if not (math.isfinite(weight) and math.isfinite(moments)):
        weight = moments = math.inf  # a non-finite probe value: it holds nothing
    hidden = hidden_share(replayed, start, [w.grad for w in slices], c.betas[0])
    scale = moment_scale((start, committed), len(slices), c.clip_grad_norm)
    return LinkVerdict(
        link=0, weight_error=weight, moment_error=moments, step_ok=True, hidden=hidden,
        moments_scale=scale,
    )  # fmt: skip
