"""What an evaluation task is: multiple-choice documents, a few-shot pool, and which docs to score.

A `MultipleChoiceDoc` is one question: a context, the candidate continuations and the index of
the right one. Choices are stored without the space that joins them to the context; the harness
adds it (see `psyche.evals.harness`), so every source format ends up scored the same way.

An `EvalTask` holds the docs to score and, when its source has a separate split for them (train or
dev), the few-shot examples. An empty `fewshot_pool` means "draw examples from `docs`, never the
doc being scored".

`select_docs` is how `--eval-task-max-docs` caps a task: the first N indices after a shuffle seeded
by the eval seed, so the same seed always scores the same subset (and a partial run, cancelled
half-way, still covers a uniform sample rather than the head of the file).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["EvalTask", "EvalTaskError", "MultipleChoiceDoc", "select_docs"]


class EvalTaskError(ValueError):
    """A task could not be found or read; the message names the source, file or line at fault."""


@dataclass(frozen=True, slots=True)
class MultipleChoiceDoc:
    """One question: `choices[gold]` is the right continuation of `context`."""

    context: str
    choices: tuple[str, ...]
    gold: int

    def __post_init__(self) -> None:
        if not isinstance(self.context, str):
            raise ValueError(f"context must be a string, got {type(self.context).__name__}")
        if len(self.choices) < 2:
            raise ValueError(f"need at least 2 choices, got {len(self.choices)}")
        if not all(isinstance(c, str) for c in self.choices):
            raise ValueError("every choice must be a string")
        # bool is an int subclass; True as a gold index is a format error, not choice 1.
        if isinstance(self.gold, bool) or not isinstance(self.gold, int):
            raise ValueError(f"gold must be an integer, got {self.gold!r}")
        if not 0 <= self.gold < len(self.choices):
            raise ValueError(f"gold {self.gold} is not an index into {len(self.choices)} choices")


@dataclass(frozen=True, slots=True)
class EvalTask:
    """A named set of docs to score, with the few-shot examples to draw from."""

    name: str
    docs: tuple[MultipleChoiceDoc, ...]
    fewshot_pool: tuple[MultipleChoiceDoc, ...] = ()
    """Examples from a separate split; empty: use `docs`, excluding the doc being scored."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a task needs a name")
        if not self.docs:
            raise ValueError(f"task {self.name!r} has no docs")


def select_docs(n_docs: int, max_docs: int | None, seed: int) -> tuple[int, ...]:
    """Indices of the docs to score: all of them in order, or the first `max_docs` after a
    `random.Random(seed)` shuffle when that caps the task."""
    if max_docs is not None and max_docs < 1:
        raise ValueError(f"max_docs must be at least 1, got {max_docs}")
    if max_docs is None or max_docs >= n_docs:
        return tuple(range(n_docs))
    order = list(range(n_docs))
    random.Random(seed).shuffle(order)
    return tuple(order[:max_docs])
