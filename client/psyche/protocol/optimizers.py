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
from psyche.protocol.strict_obj import U16, Tagged


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
