"""LR schedules at their boundary steps, and the cold-start factor on top.

See docs/protocol.md, "Run configuration" and "Batch size, data index and cold start".
"""

from __future__ import annotations

import math

import pytest

from psyche.protocol.lr_schedules import (
    ConstantLR,
    CosineLR,
    LearningRateSchedule,
    LinearLR,
    WarmupStableDecayLR,
)
from psyche.training import cold_start_factor, lr_for_step, prev_lr_for_step

CONSTANT = ConstantLR(base_lr=1e-3, warmup_steps=10, warmup_init_lr=0.0)
FLAT = ConstantLR(base_lr=1e-3, warmup_steps=0, warmup_init_lr=0.0)
LINEAR = LinearLR(base_lr=1e-3, warmup_steps=10, warmup_init_lr=1e-4, total_steps=110, final_lr=0.0)
COSINE = CosineLR(base_lr=1e-3, warmup_steps=10, warmup_init_lr=0.0, total_steps=110, final_lr=1e-4)
WSD = WarmupStableDecayLR(
    base_lr=1e-3,
    warmup_init_lr=0.0,
    cosine_decay_final_lr=5e-4,
    linear_decay_final_lr=1e-4,
    warmup_steps=10,
    stable_steps=20,
    cosine_decay_steps=10,
    linear_decay_steps=10,
)


@pytest.mark.parametrize(
    ("schedule", "step", "expected"),
    [
        # warmup start, middle and end (the end belongs to the next phase)
        (CONSTANT, 0, 0.0),
        (CONSTANT, 5, 5e-4),
        (CONSTANT, 10, 1e-3),
        (CONSTANT, 10_000, 1e-3),
        (LINEAR, 0, 1e-4),
        (LINEAR, 10, 1e-3),
        (LINEAR, 60, 5e-4),
        (LINEAR, 109, 1e-5),
        (LINEAR, 110, 0.0),
        (LINEAR, 500, 0.0),
        (COSINE, 10, 1e-3),
        (COSINE, 60, 5.5e-4),
        (COSINE, 110, 1e-4),
        # clamped past total_steps (the reference's cosine rose again; docs/protocol.md,
        # "Known flaws of the reference", flaw 16)
        (COSINE, 160, 1e-4),
        (COSINE, 210, 1e-4),
        (WSD, 5, 5e-4),
        (WSD, 10, 1e-3),
        (WSD, 29, 1e-3),
        (WSD, 30, 1e-3),
        (WSD, 35, 7.5e-4),
        (WSD, 40, 5e-4),
        (WSD, 45, 3e-4),
        (WSD, 50, 1e-4),
        (WSD, 1_000, 1e-4),
    ],
)
def test_schedule_boundaries(schedule: LearningRateSchedule, step: int, expected: float) -> None:
    assert lr_for_step(schedule, step) == pytest.approx(expected, abs=1e-12)
    assert lr_for_step(schedule, step, None) == schedule.get_lr(step)


@pytest.mark.parametrize(
    ("step", "factor"),
    [(0, 1.0), (99, 1.0), (100, 0.0), (101, 0.25), (102, 0.5), (104, 1.0), (105, 1.0)],
)
def test_cold_start_factor_ramps_over_the_bounds(step: int, factor: float) -> None:
    assert cold_start_factor(step, (100, 104)) == factor
    assert lr_for_step(FLAT, step, (100, 104)) == pytest.approx(1e-3 * factor)


@pytest.mark.parametrize("bounds", [None, (5, 5), (9, 3)])
def test_no_cold_start_means_factor_one(bounds: tuple[int, int] | None) -> None:
    assert cold_start_factor(5, bounds) == 1.0


def test_prev_lr_is_the_previous_steps_lr_and_step_zero_uses_its_own() -> None:
    assert prev_lr_for_step(CONSTANT, 6) == lr_for_step(CONSTANT, 5)
    assert prev_lr_for_step(CONSTANT, 0) == lr_for_step(CONSTANT, 0)
    assert prev_lr_for_step(FLAT, 102, (100, 104)) == pytest.approx(1e-3 * 0.25)
    assert math.isclose(prev_lr_for_step(COSINE, 111), 1e-4)


def test_negative_step_is_refused() -> None:
    with pytest.raises(ValueError, match="step"):
        lr_for_step(CONSTANT, -1)
