"""Learning-rate schedules (``[model.LLM.lr_schedule.<Variant>]``).

Each variant owns its rules (``check(path)``: every learning rate finite and >= 0, every step count
a schedule spans at least 1), mirrored by the program's ``LearningRateSchedule::check``. Cosine is
clamped to ``final_lr`` past ``total_steps`` (the reference rose again).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from psyche.protocol.config_rules import at_least_0, number_rule, rule
from psyche.protocol.strict_obj import U32, Tagged


class LearningRateSchedule(Tagged):
    """``[model.LLM.lr_schedule.<Variant>]``; all variants ramp linearly during warmup."""

    LRS: ClassVar[tuple[str, ...]] = ()
    """The variant's learning-rate fields: each must be finite and >= 0."""
    STEPS: ClassVar[tuple[str, ...]] = ()
    """Step counts that must be at least 1 (a schedule over 0 steps is no schedule)."""

    def check(self, path: str = "model.LLM.lr_schedule") -> None:
        where = f"{path}.{self.TAG}"
        for name in self.LRS:
            number_rule(f"{where}.{name}", getattr(self, name), "a finite number >= 0", at_least_0)
        for name in self.STEPS:
            rule(getattr(self, name) >= 1, f"{where}.{name} must be at least 1")

    def get_lr(self, step: int) -> float:
        raise NotImplementedError

    @staticmethod
    def _warmup(base: float, init: float, warmup_steps: int, step: int) -> float | None:
        if step < warmup_steps:
            return init + (base - init) * step / warmup_steps
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstantLR(LearningRateSchedule):
    TAG = "Constant"
    LRS = ("base_lr", "warmup_init_lr")
    base_lr: float
    warmup_steps: U32
    warmup_init_lr: float

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        return self.base_lr if w is None else w


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearLR(LearningRateSchedule):
    TAG = "Linear"
    LRS = ("base_lr", "warmup_init_lr", "final_lr")
    STEPS = ("total_steps",)
    base_lr: float
    warmup_steps: U32
    warmup_init_lr: float
    total_steps: U32
    final_lr: float

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        if w is not None:
            return w
        if step >= self.total_steps or self.total_steps <= self.warmup_steps:
            return self.final_lr
        p = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.base_lr + (self.final_lr - self.base_lr) * p


@dataclass(frozen=True, slots=True, kw_only=True)
class CosineLR(LearningRateSchedule):
    TAG = "Cosine"
    LRS = ("base_lr", "warmup_init_lr", "final_lr")
    STEPS = ("total_steps",)
    base_lr: float
    warmup_steps: U32
    warmup_init_lr: float
    total_steps: U32
    final_lr: float

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        if w is not None:
            return w
        # Clamped (our fix): past total_steps the reference's unclamped cosine rose again.
        if step >= self.total_steps or self.total_steps <= self.warmup_steps:
            return self.final_lr
        p = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.final_lr + (self.base_lr - self.final_lr) * 0.5 * (1 + math.cos(math.pi * p))


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmupStableDecayLR(LearningRateSchedule):
    TAG = "WarmupStableDecay"
    LRS = ("base_lr", "warmup_init_lr", "cosine_decay_final_lr", "linear_decay_final_lr")
    base_lr: float
    warmup_init_lr: float
    cosine_decay_final_lr: float
    linear_decay_final_lr: float
    warmup_steps: U32
    stable_steps: U32
    cosine_decay_steps: U32
    linear_decay_steps: U32

    def check(self, path: str = "model.LLM.lr_schedule") -> None:
        LearningRateSchedule.check(self, path)
        rule(
            self.linear_decay_final_lr <= self.cosine_decay_final_lr <= self.base_lr,
            f"{path}.WarmupStableDecay: need linear_decay_final_lr <= "
            "cosine_decay_final_lr <= base_lr",
        )

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        if w is not None:
            return w
        s = step - self.warmup_steps
        if s < self.stable_steps:
            return self.base_lr
        s -= self.stable_steps
        if s < self.cosine_decay_steps:
            p = s / self.cosine_decay_steps
            lo, hi = self.cosine_decay_final_lr, self.base_lr
            return lo + (hi - lo) * 0.5 * (1 + math.cos(math.pi * p))
        s -= self.cosine_decay_steps
        if s < self.linear_decay_steps:
            p = s / self.linear_decay_steps
            return (
                self.cosine_decay_final_lr
                + (self.linear_decay_final_lr - self.cosine_decay_final_lr) * p
            )
        return self.linear_decay_final_lr
