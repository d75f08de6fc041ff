"""Learning rates as a client uses them: the run's schedule times the cold-start factor.

After a pause the run resumes from a checkpoint with fresh DisTrO residuals, and large sign-SGD
steps on a cold residual would undo progress, so the reference ramps the LR back in linearly over
`cold_start_warmup_steps` steps (docs/protocol.md, "Batch size, data index and cold start"). The
factor multiplies every LR lookup a round makes: the train LR, the lookahead's `prev_lr` and the
apply LR, so all three stay consistent.

The bounds `(start, end)` come from the coordinator: `start` is the first step of the cold-start
epoch and `end = start + cold_start_warmup_steps`; they exist only while a cold start is in effect.
"""

from __future__ import annotations

from psyche.protocol.lr_schedules import LearningRateSchedule

__all__ = ["cold_start_factor", "lr_for_step", "prev_lr_for_step"]


def cold_start_factor(step: int, cold_start: tuple[int, int] | None) -> float:
    """`(step − start)/(end − start)` for `start ≤ step ≤ end`, otherwise 1 (also when unset).

    The factor is 0 at `start` itself (that round's update is a no-op, as in the reference) and
    reaches 1 at `end`. Empty or reversed bounds mean no ramp.
    """
    if cold_start is None:
        return 1.0
    start, end = cold_start
    if end <= start or not start <= step <= end:
        return 1.0
    return (step - start) / (end - start)


def lr_for_step(
    schedule: LearningRateSchedule, step: int, cold_start: tuple[int, int] | None = None
) -> float:
    """The LR of `step`: `schedule.get_lr(step) · cold_start_factor(step, cold_start)`."""
    if step < 0:
        raise ValueError(f"step must be ≥ 0, got {step}")
    return schedule.get_lr(step) * cold_start_factor(step, cold_start)


def prev_lr_for_step(
    schedule: LearningRateSchedule, step: int, cold_start: tuple[int, int] | None = None
) -> float:
    """The LR the previous step used (the lookahead's `prev_lr`); step 0 uses its own LR."""
    return lr_for_step(schedule, max(step - 1, 0), cold_start)
