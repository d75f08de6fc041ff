"""SparseLoCo's math: error-feedback chunked top-k of the pseudo-gradient, and the outer step.

A round of SparseLoCo (arXiv 2508.15706; docs/distro.md, "SparseLoCo") on one client: from the
round's start weights θ, take H inner AdamW steps on the round's data (the caller does that),
reaching θ'. Then (`encode_round`):

    Δ = θ − θ'                      the pseudo-gradient
    e ← β·e + Δ                     error feedback (client-private buffer)
    c = Q(top-k per chunk of e)     what is sent (`sparseloco_payload` gives the bytes)
    e ← e − c                       what was not sent stays for a later round

and every client, from the decoded payloads of the round's K trainers (`outer_apply`):

    u = (1/K)·Σ_r c_r               in float64, summed in client-index order
    v ← m·v + u; u = v              only with outer momentum m > 0 (run-global state)
    θ ← θ − α·u                     rounded once to the parameter dtype

`outer_apply` uses only single IEEE operations on float64 (add, multiply, divide, subtract, and
the final rounding cast), each exactly rounded, so its result does not depend on the thread count
or the CPU's vector kernels; no fused operation (`add_(…, alpha=)`, `addcmul_`, `lerp_`,
`addmm`) is used, because their vector kernels may or may not contract into an FMA.

Pure torch/numpy: no protocol, daemon or network imports. Tensors go in the caller's canonical
parameter order (ascending parameter name, as for DisTrO).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from psyche.distro.payload import PayloadError
from psyche.distro.sparseloco_payload import (
    ChunkGroup,
    SparseLoCoPayload,
    SparseLoCoSettings,
    SparseTensor,
    decode_payload,
    encode_payload,
    max_payload_bytes,
    tensor_groups,
)

__all__ = [
    "SparseLoCoPayload",
    "SparseLoCoSettings",
    "SparseLoCoState",
    "decode_payload",
    "encode_round",
    "max_payload_bytes",
    "outer_apply",
    "quantize",
]

Shape = Sequence[int]


def _shape(shape: Shape) -> tuple[int, ...]:
    return tuple(int(d) for d in shape)


class SparseLoCoState:
    """One client's SparseLoCo buffers for a model of `shapes` (canonical parameter order).

    `error` (float32, flat, one per tensor) is private: it starts at zero for a joiner and never
    leaves the client. `momentum` (float32, flat) exists only with `outer_momentum > 0`; it is
    run-global (every client holds the same bits), so a checkpoint and a P2P model fetch carry it
    (`state_dict`).
    """

    def __init__(self, shapes: Sequence[Shape], settings: SparseLoCoSettings) -> None:
        self.shapes = tuple(_shape(s) for s in shapes)
        self.settings = settings
        self.groups = tuple(tensor_groups(_numel(s), settings) for s in self.shapes)
        self.error = [torch.zeros(_numel(s), dtype=torch.float32) for s in self.shapes]
        self.momentum: list[torch.Tensor] | None = (
            [torch.zeros(_numel(s), dtype=torch.float32) for s in self.shapes]
            if settings.outer_momentum > 0
            else None
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The run-global part (the outer momentum; empty without one)."""
        if self.momentum is None:
            return {}
        return {f"momentum.{i}": v.clone() for i, v in enumerate(self.momentum)}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Load what `state_dict` gave (from a checkpoint or a peer); checked strictly."""
        expected = set(self.state_dict())
        if set(state) != expected:
            raise ValueError(
                f"SparseLoCo state has keys {sorted(state)}, expected {sorted(expected)}"
            )
        if self.momentum is None:
            return
        loaded = []
        for i, v in enumerate(self.momentum):
            t = state[f"momentum.{i}"]
            if t.dtype != torch.float32 or t.shape != v.shape or not bool(t.isfinite().all()):
                raise ValueError(f"momentum.{i}: need finite float32 of shape {tuple(v.shape)}")
            loaded.append(t.detach().clone().contiguous())
        self.momentum = loaded

    def reset_error(self) -> None:
        """Zero the private error-feedback buffers (a joiner's, or after a lost round)."""
        for e in self.error:
            e.zero_()


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """Round float32 `x` to bf16 (nearest-even) and return its 16 bits as int64."""
    return x.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF


def _bf16_value(bits: torch.Tensor) -> torch.Tensor:
    return (bits << 16).to(torch.int32).view(torch.float32)


def quantize(
    x: torch.Tensor, group: ChunkGroup, value_bits: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k of each chunk of `x` (float32, `(chunks, n)`), quantized canonically.

    Returns (sorted local indices, sign bits, magnitude bits, bf16 scale bits, float32 values
    the receivers will reconstruct), all `(chunks, k)` but the scales `(chunks, value_bits)`.
    1 bit: one scale, the mean kept magnitude (the least-squares level for signs). 2 bits: the
    kept entries above their mean magnitude form the hi group, the others lo; each level is its
    group's mean magnitude; a chunk whose two levels round to the same bf16 uses one level.
    """
    _, idx = torch.topk(x.abs(), group.k, dim=1, sorted=False)
    idx, _ = torch.sort(idx, dim=1)
    vals = torch.gather(x, 1, idx)
    mag = vals.abs()
    signs = (vals < 0).to(torch.int64)
    mean = mag.mean(dim=1, keepdim=True)
    if value_bits == 1:
        scales = _bf16_bits(mean)
        mags = torch.zeros_like(signs)
        level = _bf16_value(scales).expand_as(vals)
    else:
        hi = mag > mean
        n_hi = hi.sum(dim=1, keepdim=True)
        # k equal magnitudes (a fresh inner AdamW moves every weight by the same lr) can all
        # compare above their float32 mean, which rounds below them about one time in four: no
        # lo group then, and its mean would be 0/0, a NaN scale that dropped the round (issue 40).
        n_lo = group.k - n_hi
        lo_mean = torch.where(hi, 0.0, mag).sum(1, keepdim=True) / n_lo.clamp(min=1)
        hi_mean = torch.where(hi, mag, 0.0).sum(1, keepdim=True) / n_hi.clamp(min=1)
        lo_b, hi_b = _bf16_bits(lo_mean), _bf16_bits(hi_mean)
        one_level = (n_hi == 0) | (n_lo == 0) | (lo_b == hi_b)
        mean_b = _bf16_bits(mean)
        lo_b = torch.where(one_level, mean_b, lo_b)
        hi_b = torch.where(one_level, mean_b, hi_b)
        mags = (hi & ~one_level).to(torch.int64)
        scales = torch.cat([lo_b, hi_b], dim=1)
        level = torch.where(mags == 1, _bf16_value(hi_b), _bf16_value(lo_b))
    if bool(((scales & 0x7F80) == 0x7F80).any()):
        raise PayloadError("the pseudo-gradient is not finite (or too large for a bf16 scale)")
    signs = torch.where(level == 0, 0, signs)
    values = torch.where(signs == 1, -level, level)
    return idx, signs, mags, scales, values


def encode_round(
    state: SparseLoCoState,
    start_params: Sequence[torch.Tensor],
    end_params: Sequence[torch.Tensor],
    *,
    step: int,
    nonce: int = 0,
) -> bytes:
    """Compress this client's round (weights `start_params` → `end_params`) and update its
    error-feedback buffers; return the canonical payload bytes (`max_payload_bytes` long)."""
    s = state.settings
    if len(start_params) != len(state.shapes) or len(end_params) != len(state.shapes):
        raise ValueError(f"expected {len(state.shapes)} tensors per parameter list")
    tensors = []
    for start, end, e, groups, shape in zip(
        start_params, end_params, state.error, state.groups, state.shapes, strict=True
    ):
        if tuple(start.shape) != shape or tuple(end.shape) != shape:
            raise ValueError(f"parameter shape {tuple(start.shape)} differs from {shape}")
        delta = start.detach().reshape(-1).float() - end.detach().reshape(-1).float()
        e.mul_(s.error_decay).add_(delta)
        parts: list[list[np.ndarray]] = [[], [], [], []]
        for g in groups:
            x = e[g.start : g.start + g.chunks * g.n].view(g.chunks, g.n)
            idx, signs, mags, scales, values = quantize(x, g, s.value_bits)
            x.scatter_add_(1, idx, -values)  # e ← e − c: what was sent leaves the buffer
            for out, t in zip(parts, (idx, signs, mags, scales), strict=True):
                out.append(t.numpy())
        tensors.append(SparseTensor(*(tuple(p) for p in parts)))
    return encode_payload(SparseLoCoPayload(step, nonce, tuple(tensors)), state.shapes, s)


@torch.no_grad()
def outer_apply(
    params: Sequence[torch.Tensor],
    payloads: Sequence[SparseLoCoPayload],
    state: SparseLoCoState,
    settings: SparseLoCoSettings,
    outer_lr: float,
) -> None:
    """Apply the round's outer step to `params` (the round's start weights, identical on every
    client) in place, from the decoded `payloads` ordered by client index. Bit-identical on
    every client, thread count and CPU kernel set (module docstring). No payloads: no change
    (the momentum, if any, still decays and moves the weights)."""
    if len(params) != len(state.shapes):
        raise ValueError(f"expected {len(state.shapes)} parameters, got {len(params)}")
    k = len(payloads)
    for i, (p, groups, shape) in enumerate(zip(params, state.groups, state.shapes, strict=True)):
        if tuple(p.shape) != shape or not p.is_contiguous():
            raise ValueError(f"parameter {i}: need a contiguous tensor of shape {shape}")
        acc = torch.zeros(_numel(shape), dtype=torch.float64)
        for payload in payloads:  # client-index order: the sum is the same on every client
            idx, vals = payload.tensors[i].flat(groups)
            acc[idx] = acc[idx] + vals.to(torch.float64)  # distinct indices: one add each
        flat = p.data.view(-1)
        if state.momentum is None:
            # Only entries with a non-zero sum move (θ − 0·α is θ exactly), so the step is taken
            # on those alone: the same bits as the dense formula at a fraction of its cost.
            nz = acc.nonzero().squeeze(1)
            step = (acc[nz] / k) * outer_lr
            flat[nz] = (flat[nz].to(torch.float64) - step).to(p.dtype)
            continue
        update = acc / k if k else acc
        v = state.momentum[i].to(torch.float64) * settings.outer_momentum + update
        state.momentum[i] = v.to(torch.float32)
        new = flat.to(torch.float64) - state.momentum[i].to(torch.float64) * outer_lr
        flat.copy_(new.to(p.dtype))
