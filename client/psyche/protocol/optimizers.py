"""Optimizer definitions (``[model.LLM.optimizer.<Variant>]``).

Each variant owns its rules (``check(path)``), mirrored arm by arm by the program's
``OptimizerDefinition::check``; the f32 fields are checked as the program stores them. Only DisTrO
trains a multi-client run; :meth:`DistroOptimizer.check_fields` is also what
:class:`psyche.distro.config.DistroConfig` applies, so a config that passed ``validate-config``
always builds an optimizer and one that would not build never passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from psyche.protocol.config_rules import above_0, at_least_0, beta, number_rule, rule, unit
from psyche.protocol.strict_obj import U8, U16, Tagged


class OptimizerDefinition(Tagged):
    """``[model.LLM.optimizer.<Variant>]``. Only DisTrO is meaningful for multi-client runs."""

    def check(self, path: str = "model.LLM.optimizer") -> None:
        raise NotImplementedError


def check_clip_grad_norm(path: str, value: float | None) -> None:
    if value is not None:
        number_rule(
            path,
            value,
            "a finite number > 0 (leave it out to disable clipping)",
            above_0,
            f32=True,
        )


def check_weight_decay(path: str, value: float | None) -> None:
    if value is not None:
        number_rule(path, value, "a finite number >= 0", at_least_0, f32=True)


@dataclass(frozen=True, slots=True)
class DummyOptimizer(OptimizerDefinition):
    TAG = "Dummy"

    def check(self, path: str = "model.LLM.optimizer") -> None:
        rule(False, f"{path} must not be Dummy")


@dataclass(frozen=True, slots=True, kw_only=True)
class AdamWOptimizer(OptimizerDefinition):
    TAG = "AdamW"
    betas: tuple[float, float]
    weight_decay: float
    eps: float
    clip_grad_norm: float | None = None

    def check(self, path: str = "model.LLM.optimizer") -> None:
        where = f"{path}.AdamW"
        for i, b in enumerate(self.betas):
            number_rule(f"{where}.betas[{i}]", b, "a finite number in [0, 1)", beta, f32=True)
        check_weight_decay(f"{where}.weight_decay", self.weight_decay)
        number_rule(f"{where}.eps", self.eps, "a finite number > 0", above_0, f32=True)
        check_clip_grad_norm(f"{where}.clip_grad_norm", self.clip_grad_norm)


@dataclass(frozen=True, slots=True, kw_only=True)
class DistroOptimizer(OptimizerDefinition):
    TAG = "Distro"
    clip_grad_norm: float | None = None
    """Global L2 gradient clipping before compression; None disables it (if set: finite, > 0)."""
    weight_decay: float | None = None
    """Decoupled weight decay applied by each trainer; None means 0."""
    compression_decay: float
    """Residual decay β applied each step before the new gradient is added."""
    compression_topk: U16
    """DCT coefficients kept per chunk."""
    compression_chunk: U16
    """Target DCT tile edge (real edge: largest divisor of the dimension ≤ this)."""
    quantize_1bit: bool
    """Send only the sign of each kept coefficient."""

    def check(self, path: str = "model.LLM.optimizer") -> None:
        DistroOptimizer.check_fields(
            f"{path}.Distro.",
            compression_decay=self.compression_decay,
            compression_topk=self.compression_topk,
            compression_chunk=self.compression_chunk,
            clip_grad_norm=self.clip_grad_norm,
            weight_decay=self.weight_decay,
        )

    @staticmethod
    def check_fields(
        prefix: str,
        *,
        compression_decay: float,
        compression_topk: int,
        compression_chunk: int,
        clip_grad_norm: float | None,
        weight_decay: float | None,
    ) -> None:
        """The DisTrO rules, in the program's order; each message names ``prefix`` + the field.
        A static method so :class:`~psyche.distro.config.DistroConfig`, which holds the same
        values without being a run-config entry, applies these rules and no copy of them."""
        rule(compression_chunk > 0, f"{prefix}compression_chunk must be > 0")
        rule(compression_topk > 0, f"{prefix}compression_topk must be > 0")
        number_rule(
            f"{prefix}compression_decay",
            compression_decay,
            "a finite number in [0, 1]",
            unit,
            f32=True,
        )
        check_clip_grad_norm(f"{prefix}clip_grad_norm", clip_grad_norm)
        check_weight_decay(f"{prefix}weight_decay", weight_decay)


def _error_decay_ok(x: float) -> bool:
    return 0 < x <= 1


SPARSELOCO_MAX_INNER_STEPS = 64
"""Most inner AdamW steps per round: a round's batch is split H ways, and past 64 the error
feedback carries more than a round's worth of drift (docs/distro.md, "SparseLoCo")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SparseLoCoOptimizer(OptimizerDefinition):
    """``[model.LLM.optimizer.SparseLoCo]``: H inner AdamW steps per round, then an
    error-feedback chunked top-k of the pseudo-gradient with 1- or 2-bit values, applied by an
    outer step (docs/distro.md, "SparseLoCo"). The run's lr_schedule drives the inner AdamW."""

    TAG = "SparseLoCo"
    betas: tuple[float, float]
    """Inner AdamW betas, each in [0, 1)."""
    weight_decay: float
    """Inner AdamW decoupled weight decay (>= 0)."""
    eps: float
    """Inner AdamW epsilon (> 0)."""
    clip_grad_norm: float | None = None
    """Inner global L2 gradient clipping per inner step; None disables it."""
    inner_steps: U8
    """H: inner steps per round, 1..=64; the round's assigned batch is split into H equal parts."""
    outer_lr: float
    """Learning rate of the outer step (> 0)."""
    outer_momentum: float
    """Outer (Nesterov-free) momentum in [0, 1); 0 is a plain outer step."""
    topk_chunk: U16
    """Chunk length of the chunked top-k (> 0)."""
    topk: U16
    """Values kept per chunk, 1..=topk_chunk."""
    value_bits: U8
    """Bits per kept value: 1 (sign) or 2."""
    error_decay: float
    """Error-feedback decay β in (0, 1]."""

    def check(self, path: str = "model.LLM.optimizer") -> None:
        where = f"{path}.SparseLoCo"
        for i, b in enumerate(self.betas):
            number_rule(f"{where}.betas[{i}]", b, "a finite number in [0, 1)", beta, f32=True)
        check_weight_decay(f"{where}.weight_decay", self.weight_decay)
        number_rule(f"{where}.eps", self.eps, "a finite number > 0", above_0, f32=True)
        check_clip_grad_norm(f"{where}.clip_grad_norm", self.clip_grad_norm)
        rule(
            1 <= self.inner_steps <= SPARSELOCO_MAX_INNER_STEPS,
            f"{where}.inner_steps ({self.inner_steps}) must be in 1..={SPARSELOCO_MAX_INNER_STEPS}",
        )
        number_rule(f"{where}.outer_lr", self.outer_lr, "a finite number > 0", above_0, f32=True)
        number_rule(
            f"{where}.outer_momentum",
            self.outer_momentum,
            "a finite number in [0, 1)",
            beta,
            f32=True,
        )
        rule(self.topk_chunk > 0, f"{where}.topk_chunk must be > 0")
        rule(
            1 <= self.topk <= self.topk_chunk,
            f"{where}.topk ({self.topk}) must be in 1..=topk_chunk ({self.topk_chunk})",
        )
        rule(
            self.value_bits in (1, 2),
            f"{where}.value_bits ({self.value_bits}) must be 1 or 2",
        )
        number_rule(
            f"{where}.error_decay",
            self.error_decay,
            "a finite number in (0, 1]",
            _error_decay_ok,
            f32=True,
        )
