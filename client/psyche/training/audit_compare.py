"""How far a replayed SparseLoCo inner step is from the committed one, and when that passes.

Shared by the audit of a whole link (``psyche.training.sparseloco_audit.replay_link``) and the
probe of inner step 0 (``psyche.training.sparseloco_probe.replay_probe``): the weights' error
relative to the step taken, each moment's relative to what the step added to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["ROUNDING_ULPS", "TOLERANCE", "LinkVerdict", "compare_states", "relative_errors"]

TOLERANCE = 1e-2
"""Largest relative error of a replayed link that still passes. Measured (bench/README.md,
"SparseLoCo audit"): honest links replayed on another CPU kernel set at most 7.4e-7 (0 at 2
threads), free riders' cheated links at least 0.086 (trained on ½ of each step's samples)."""


ROUNDING_ULPS = 2
"""With weights of a short dtype (bfloat16), what a replayed value may differ from the committed
one by for rounding alone, in units in the last place of that dtype: AdamW rounds each of its
elementwise results to the weights' dtype, where one step moves a weight by about one unit and a
moment's increment is a tenth of the moment, so a gradient that differs in its last float32
bits (another kernel set, another device) flips some roundings, and each flip is a whole unit —
a relative error of several percent of the step. Counted beyond this allowance only, an honest
replay is 0 and a free rider's, whose values are many units off, is not (bench/README.md, "The
SparseLoCo audit on bf16 weights, across kernel sets"). Float32 weights are compared as before:
their rounding is far below :data:`TOLERANCE`."""


@dataclass(frozen=True, slots=True)
class LinkVerdict:
    link: int
    weight_error: float
    """‖w'_replayed − w_committed‖ / ‖w'_replayed − w_before‖: the error relative to the step."""
    moment_error: float
    """The larger over the two AdamW moments of ‖replayed − committed‖ / ‖replayed − β·before‖:
    the error relative to what this step added to the moment."""
    step_ok: bool
    """The committed step counts are the replayed ones (exact: they are counts)."""

    @property
    def ok(self) -> bool:
        return self.step_ok and max(self.weight_error, self.moment_error) <= TOLERANCE


def _sums(
    replayed: dict[str, torch.Tensor],
    after: dict[str, torch.Tensor],
    before: dict[str, torch.Tensor],
    key: str,
    n: int,
    beta: float,
    bits: int,
) -> tuple[float, float]:
    """(Σ‖r − after‖², Σ‖r − β·before‖²) over the model's ``key`` tensors, in float64; each
    tensor is widened once (the two sums used to widen ``r`` twice: a third of the compare).
    With weights of fewer than float32's 24 significand ``bits``, each value's difference counts
    only beyond :data:`ROUNDING_ULPS` of that dtype (:func:`_beyond_rounding`)."""
    num = base = 0.0
    for i in range(n):
        r = replayed[f"{key}.{i}"].double().view(-1)  # a new tensor: never the caller's
        step = torch.sub(r, before[f"{key}.{i}"].double().view(-1), alpha=beta)
        base += float(torch.dot(step, step))  # a third of square().sum()'s time
        c = after[f"{key}.{i}"].double().view(-1)
        d = torch.sub(r, c)
        if bits < 24:
            d = _beyond_rounding(d, r, c, step, bits)
        num += float(torch.dot(d, d))
    return num, base


def _beyond_rounding(
    d: torch.Tensor, r: torch.Tensor, c: torch.Tensor, step: torch.Tensor, bits: int
) -> torch.Tensor:
    """|d| less :data:`ROUNDING_ULPS` units in the last place of a ``bits``-bit significand at
    the larger of |r| and |c|, and as many at |step| (a moment's increment (1 − β)·g carries the
    rounding of g, which is more than the moment's own unit where the two nearly cancel), at
    least 0."""
    allow = _units(torch.maximum(r.abs(), c.abs()), bits).add_(_units(step.abs(), bits))
    return d.abs_().sub_(allow.mul_(ROUNDING_ULPS)).clamp_min_(0.0)


def _units(x: torch.Tensor, bits: int) -> torch.Tensor:
    """A unit in the last place of a ``bits``-bit significand at each value of ``x`` (float64,
    ≥ 0): x's power of two (its exponent bits alone, so 0 at 0) times 2^(1 − bits). Bit masking,
    not frexp and ldexp, which took a third of a bf16 compare."""
    top = x.contiguous().view(torch.int64).bitwise_and_(_EXPONENT).view(torch.float64)
    return top.mul_(2.0 ** (1 - bits))


_EXPONENT = 0x7FF0000000000000
"""A float64's exponent bits."""


def _rel(num: float, base: float) -> float:
    if base == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return (num / base) ** 0.5


def relative_errors(
    replayed: dict[str, torch.Tensor],
    committed: dict[str, torch.Tensor],
    before: dict[str, torch.Tensor],
    n: int,
    betas: tuple[float, float],
    dtype: torch.dtype,
) -> tuple[float, float]:
    """The weights' error relative to the step taken, and the larger of the moments' errors
    relative to what the step added to each, over ``n`` tensors keyed ``w.i``/``m.i``/``v.i``,
    for a model whose weights (and so AdamW's moments) are of ``dtype``."""
    bits = 1 - round(math.log2(torch.finfo(dtype).eps))  # eps = 2^(1 − significand bits)
    weight = _rel(*_sums(replayed, committed, before, "w", n, 1.0, bits))
    # Against the step's own increment (m' − β₁m = (1 − β₁)·g), not the moment's size: a moment
    # carries its history, which would dilute a wrong gradient by 1 − β.
    moments = max(
        _rel(*_sums(replayed, committed, before, k, n, beta, bits))
        for k, beta in zip("mv", betas, strict=True)
    )
    return weight, moments


def compare_states(
    link: int,
    before: dict[str, torch.Tensor],
    replayed: dict[str, torch.Tensor],
    after: dict[str, torch.Tensor],
    betas: tuple[float, float],
    dtype: torch.dtype,
) -> LinkVerdict:
    """How far a replayed whole state is from the committed ``after`` (step counts exact)."""
    n = len(replayed) // 4
    step_ok = all(bool(torch.equal(replayed[f"t.{i}"], after[f"t.{i}"])) for i in range(n))
    weight, moments = relative_errors(replayed, after, before, n, betas, dtype)
    return LinkVerdict(link=link, weight_error=weight, moment_error=moments, step_ok=step_ok)
