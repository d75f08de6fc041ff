"""How far a replayed SparseLoCo inner step is from the committed one, and when that passes.

Shared by the audit of a whole link (``psyche.training.sparseloco_audit.replay_link``) and the
probe of inner step 0 (``psyche.training.sparseloco_probe.replay_probe``): the weights' error
relative to the step taken, each moment's relative to what the step added to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "HIDDEN_LIMIT",
    "MOMENT_SLACK",
    "ROUNDING_ULPS",
    "TOLERANCE",
    "LinkVerdict",
    "compare_states",
    "hidden_share",
    "moment_scale",
    "relative_errors",
]

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


HIDDEN_LIMIT = 0.5
"""Largest share of the verifier's gradient that its own replay of a step may lose from the first
moment (:func:`hidden_share`). A committed state whose moments dwarf the gradient (1e8 where an
honest one is below the clip bound) makes AdamW round the gradient away: every replay from it then
lands on the committed next state without the gradient, and a trainer that computes none passes
every check (found 2026-12-06). An honest replay loses only rounding: at most 1.7e-7 of it in
float32 and 1.1e-2 (a link) or 3.0e-2 (a probe's 16 values per tensor) in bfloat16, on two
thread counts and kernel sets; a swamped chain at least 939 (bench/README.md, "A chain whose
moments hide the gradient")."""


MOMENT_SLACK = 0.1
"""How far beyond the clip bound a committed state's moments may reach for rounding alone
(:func:`moment_scale`). AdamW's first moment is an average of clipped gradients, each of norm at
most ``clip_grad_norm``, so its norm over the model never exceeds the bound, and each second
moment never exceeds its square; a bfloat16 moment rounds up by at most 2^-8 a step, which over
an average of about 1/(1 − β₁) = 10 steps is 4 %, and a bfloat16 clip may let the gradient's
norm exceed the bound by as much again as its own rounding (0.4 %). Beyond that the state cannot
come from the work: its moments were made up (to swamp the gradient, or to steer the update)."""


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
    hidden: float
    """The share of the gradient the replay's first moment lost to rounding (:func:`hidden_share`;
    inf for a zero gradient): a step that could not show it proves nothing."""
    moments_scale: float = 0.0
    """The committed moments before and after the step in units of the clip bound
    (:func:`moment_scale`): at most 1 + :data:`MOMENT_SLACK` for moments that clipped gradients
    made; 0 in a run that does not clip."""

    @property
    def ok(self) -> bool:
        return (
            self.step_ok
            and max(self.weight_error, self.moment_error) <= TOLERANCE
            and self.hidden <= HIDDEN_LIMIT
            and self.moments_scale <= 1.0 + MOMENT_SLACK
        )


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


def hidden_share(
    replayed: dict[str, torch.Tensor],
    before: dict[str, torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    beta1: float,
) -> float:
    """‖(m' − β₁·m) − (1 − β₁)·g‖ / ‖(1 − β₁)·g‖ over the model, in float64: how much of the
    gradient ``g`` (the verifier's, clipped) its replay from ``before`` failed to add to the
    first moment m' — 0 up to rounding when the committed m is of the gradient's own scale, 1
    when m is so large that AdamW rounds g away. inf when g is 0 (nothing to show)."""
    num = base = 0.0
    for i, g in enumerate(grads):
        if g is None:
            continue
        inc = g.detach().to("cpu").double().view(-1).mul_(1.0 - beta1)
        real = torch.sub(
            replayed[f"m.{i}"].double().view(-1), before[f"m.{i}"].double().view(-1), alpha=beta1
        )
        d = real.sub_(inc)
        num += float(torch.dot(d, d))
        base += float(torch.dot(inc, inc))
    if base == 0.0 or not math.isfinite(num):
        return math.inf
    return (num / base) ** 0.5


def moment_scale(states: Sequence[dict[str, torch.Tensor]], n: int, clip: float | None) -> float:
    """The largest size of the committed moments of ``states`` (``n`` tensors keyed ``m.i``
    and ``v.i`` each, a whole model or a probe's positions of it) in units of the clip bound:
    the first moment's norm over all of them and the root of the largest second moment, divided
    by ``clip``. With each inner gradient clipped to norm ``clip``, an honest state's is at most
    1 up to rounding (:data:`MOMENT_SLACK`), whatever its history; a subset of the values can
    only be smaller. 0 without a clip (nothing bounds the moments); inf for a non-finite one."""
    if clip is None or clip <= 0.0:
        return 0.0
    worst = 0.0
    for state in states:
        square = peak = 0.0
        for i in range(n):
            m = state[f"m.{i}"].double().view(-1)
            square += float(torch.dot(m, m))
            v = state[f"v.{i}"]
            if v.numel():
                peak = max(peak, float(v.abs().max()))
        size = max(math.sqrt(square), math.sqrt(peak)) / clip
        worst = max(worst, size if math.isfinite(size) else math.inf)
    return worst


def compare_states(
    link: int,
    before: dict[str, torch.Tensor],
    replayed: dict[str, torch.Tensor],
    after: dict[str, torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    betas: tuple[float, float],
    dtype: torch.dtype,
    clip: float | None,
) -> LinkVerdict:
    """How far a replayed whole state is from the committed ``after`` (step counts exact), how
    much of the replay's gradient ``grads`` the committed ``before`` hid, and how far the two
    committed states' moments reach against the ``clip`` bound."""
    n = len(replayed) // 4
    step_ok = all(bool(torch.equal(replayed[f"t.{i}"], after[f"t.{i}"])) for i in range(n))
    weight, moments = relative_errors(replayed, after, before, n, betas, dtype)
    hidden = hidden_share(replayed, before, grads, betas[0])
    scale = moment_scale((before, after), n, clip)
    return LinkVerdict(link, weight, moments, step_ok, hidden, scale)
