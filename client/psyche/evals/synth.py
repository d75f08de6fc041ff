"""A small multiple-choice task made locally, for tests and demos that must not download anything.

"Continue the alphabet": the context is a run of consecutive letters (``Continue: mnop``) and
the gold choice is the next two letters (``qr``); the three distractors are two-letter runs that
start elsewhere. Letters wrap around after ``z``. Which choice is right follows from the context's
last letter alone, so even a tiny model trained for seconds on the train split learns it, while an
untrained model scores near chance (1 in 4).

Written in the native JSON Lines format (``context``/``choices``/``gold``) as ``validation.jsonl``
(scored) and ``train.jsonl`` (few-shot pool, and training text). Everything is a pure function of
the seed; the two splits use separate random streams.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from psyche.evals.tasks import MultipleChoiceDoc

__all__ = ["CHOICES", "synthetic_docs", "write_synthetic_task"]

CHOICES = 4
_ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def _run(start: int, length: int) -> str:
    return "".join(_ALPHABET[(start + i) % len(_ALPHABET)] for i in range(length))


def synthetic_docs(n: int, seed: int, split: str = "validation") -> list[MultipleChoiceDoc]:
    """`n` docs of the alphabet task; `split` selects an independent random stream."""
    rng = random.Random(f"psyche-evals-synth:{split}:{seed}")
    docs = []
    for _ in range(n):
        start, length = rng.randrange(len(_ALPHABET)), rng.randint(3, 6)
        answer = (start + length) % len(_ALPHABET)
        others = rng.sample([s for s in range(len(_ALPHABET)) if s != answer], CHOICES - 1)
        gold = rng.randrange(CHOICES)
        starts = [*others[:gold], answer, *others[gold:]]
        choices = tuple(_run(s, 2) for s in starts)
        docs.append(MultipleChoiceDoc(f"Continue: {_run(start, length)}", choices, gold))
    return docs


def _write(path: Path, docs: list[MultipleChoiceDoc]) -> None:
    lines = [
        json.dumps({"context": d.context, "choices": list(d.choices), "gold": d.gold}) + "\n"
        for d in docs
    ]
    path.write_text("".join(lines), encoding="utf-8")


def write_synthetic_task(
    out_dir: Path, *, docs: int = 64, seed: int = 0, train_docs: int | None = None
) -> list[Path]:
    """Write ``validation.jsonl`` (`docs` docs) and ``train.jsonl`` (`train_docs`, by default
    four times as many) into `out_dir`; returns the two paths."""
    if docs < 1:
        raise ValueError(f"docs must be at least 1, got {docs}")
    n_train = 4 * docs if train_docs is None else train_docs
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "validation.jsonl", out_dir / "train.jsonl"]
    _write(paths[0], synthetic_docs(docs, seed, "validation"))
    _write(paths[1], synthetic_docs(n_train, seed, "train"))
    return paths
