"""The training layer's exception family.

Callers (the daemon, the CLI) catch `TrainingError` to handle anything this package raises on
purpose; the subclasses say what went wrong so the caller can choose between retrying, skipping a
round and exiting. Each message names the input at fault and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "AuditRecordingError",
    "ModelLoadError",
    "NonFiniteGradient",
    "TrainingCancelled",
    "TrainingError",
]


class TrainingError(Exception):
    """Base class of every error the training layer raises deliberately."""


class ModelLoadError(TrainingError):
    """A model or tokenizer could not be built from the given checkpoint or tensors.

    Raised for missing files, unsupported architectures or checkpoint kinds, weights that do not
    match the config (missing, unexpected or mis-shaped tensors) and Hub download failures.
    """


class TrainingCancelled(TrainingError):
    """The train step was cancelled between micro-batches; the weights are as before the step.

    The lookahead has been undone by restoring the saved weights, so they are bit-identical to
    those before `train_step`; gradients are dropped and no payload exists for this round.
    """


class NonFiniteGradient(TrainingError):
    """The gradient norm was NaN or infinite; the step was dropped like a cancelled one.

    The DisTrO residual was left untouched, so one bad batch does not poison later rounds.
    """


class AuditRecordingError(TrainingError):
    """A SparseLoCo trainer could not write its round's audit chain (a full or missing blob
    directory); the round was dropped like a cancelled one and its files deleted."""
