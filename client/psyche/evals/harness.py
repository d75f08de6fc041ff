"""Score a causal LM on multiple-choice tasks by comparing the log-likelihood of each choice.

Prompt of a doc (`EvalHarness.prompt`): ``fewshot`` solved examples, each ``context +
continuation(gold choice)``, then the doc's context, all separated by a blank line (``"\\n\\n"``).
The examples are drawn from the task's few-shot pool with ``random.Random(f"{seed}:{index}")``,
``index`` being the doc's position in the task, so a doc's prompt depends only on the seed and the
doc: not on which other docs are scored, nor in what order. They keep the order drawn.

A choice's continuation is ``" " + choice`` (the usual single-space target delimiter), or just the
choice when the context is empty or already ends in whitespace. Per doc:

- ``accuracy``: the choice with the highest summed log-probability is the gold one;
- ``accuracy_norm``: the same, with each log-probability divided by the number of UTF-8 bytes of
  the continuation it scores (delimiter included), so long choices are not penalised for length
  and the measure does not depend on the tokenizer.

Ties go to the earlier choice. Tokenization, left truncation and batching: see
`psyche.evals.scoring`. The task cap ``max_docs`` is `psyche.evals.tasks.select_docs`.
"""

from __future__ import annotations

import random
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from psyche.evals.scoring import (
    ChoiceTokens,
    continuation_logprobs,
    encode,
    model_max_length,
    start_tokens,
)
from psyche.evals.tasks import EvalTask, MultipleChoiceDoc, select_docs

__all__ = [
    "FEWSHOT_SEPARATOR",
    "EvalHarness",
    "EvalScore",
    "continuation_text",
    "tokenizer_from_files",
]

FEWSHOT_SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class EvalScore:
    """One task's result; `index` is the task's position in the harness's task list."""

    task: str
    index: int
    accuracy: float
    accuracy_norm: float
    docs: int
    """How many docs the accuracies are over."""
    complete: bool
    """False when the run was cancelled before every selected doc of the task was scored."""


def continuation_text(context: str, choice: str) -> str:
    """What is scored after `context` for `choice` (see the module docstring)."""
    return choice if not context or context[-1].isspace() else " " + choice


def _pick(scores: list[float]) -> int:
    return max(range(len(scores)), key=scores.__getitem__)


class EvalHarness:
    """Multiple-choice tasks prepared for scoring; `run` may be called again on other weights.

    Token ids are computed on the first `run` and kept, so repeated evals during training only
    pay for the forward passes.
    """

    def __init__(
        self,
        tasks: tuple[EvalTask, ...] | list[EvalTask],
        tokenizer: PreTrainedTokenizerBase,
        *,
        fewshot: int = 0,
        seed: int = 42,
        max_docs: int | None = None,
        batch_size: int = 8,
    ) -> None:
        if fewshot < 0:
            raise ValueError(f"fewshot must be >= 0, got {fewshot}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.tasks = tuple(tasks)
        self.tokenizer = tokenizer
        self.fewshot, self.seed, self.batch_size = fewshot, seed, batch_size
        self.selected = [select_docs(len(t.docs), max_docs, seed) for t in self.tasks]
        """Per task, the indices of the docs scored, in scoring order."""
        self._prepared: dict[int, list[_Doc]] = {}

    def fewshot_examples(self, task: EvalTask, index: int) -> list[MultipleChoiceDoc]:
        """The solved examples that precede doc `index` of `task`."""
        pool = task.fewshot_pool
        # Without a separate split the pool is the other docs: index j >= index skips the doc.
        size = len(pool) if pool else len(task.docs) - 1
        k = min(self.fewshot, size)
        if k == 0:
            return []
        picks = random.Random(f"{self.seed}:{index}").sample(range(size), k)
        if pool:
            return [pool[j] for j in picks]
        return [task.docs[j if j < index else j + 1] for j in picks]

    def prompt(self, task: EvalTask, index: int) -> str:
        """The text every choice of doc `index` is scored after."""
        shots = [
            ex.context + continuation_text(ex.context, ex.choices[ex.gold])
            for ex in self.fewshot_examples(task, index)
        ]
        return FEWSHOT_SEPARATOR.join([*shots, task.docs[index].context])

    def _prepare(self, task_index: int) -> list[_Doc]:
        if task_index not in self._prepared:
            task = self.tasks[task_index]
            start = start_tokens(self.tokenizer)
            docs = []
            for i in self.selected[task_index]:
                prompt = self.prompt(task, i)
                prompt_ids = encode(self.tokenizer, prompt)
                conts = [continuation_text(prompt, c) for c in task.docs[i].choices]
                tokens = [
                    ChoiceTokens.build(self.tokenizer, start, prompt, cont, prompt_ids)
                    for cont in conts
                ]
                sizes = [max(1, len(cont.encode("utf-8"))) for cont in conts]
                docs.append(_Doc(task.docs[i].gold, tokens, sizes))
            self._prepared[task_index] = docs
        return self._prepared[task_index]

    def run(self, model: torch.nn.Module, cancel: threading.Event | None = None) -> list[EvalScore]:
        """Score every task; the model's train/eval mode is restored afterwards.

        `cancel` is checked before each batch: once set, the run stops and returns the tasks
        finished so far plus, with ``complete=False``, the one under way if any of its docs were
        done. Tasks not reached get no score.
        """
        max_len = model_max_length(model)
        was_training = model.training
        model.eval()
        scores: list[EvalScore] = []
        try:
            with torch.no_grad():
                for index in range(len(self.tasks)):
                    score = self._run_task(index, model, max_len, cancel)
                    if score is not None:
                        scores.append(score)
                    if score is None or not score.complete:
                        break
        finally:
            model.train(was_training)
        return scores

    def _run_task(
        self,
        index: int,
        model: torch.nn.Module,
        max_len: int,
        cancel: threading.Event | None,
    ) -> EvalScore | None:
        docs = self._prepare(index)
        flat = [(d, c) for d, doc in enumerate(docs) for c in range(len(doc.tokens))]
        logprobs: list[list[float]] = [[] for _ in docs]
        done = correct = correct_norm = 0
        complete = True
        for lo in range(0, len(flat), self.batch_size):
            if cancel is not None and cancel.is_set():
                complete = False
                break
            batch = flat[lo : lo + self.batch_size]
            results = continuation_logprobs(model, [docs[d].tokens[c] for d, c in batch], max_len)
            for (d, _), value in zip(batch, results, strict=True):
                logprobs[d].append(value)
            # Batches run in doc order, so the finished docs are a prefix of `docs`.
            while done < len(docs) and len(logprobs[done]) == len(docs[done].tokens):
                doc, lps = docs[done], logprobs[done]
                per_byte = [lp / n for lp, n in zip(lps, doc.sizes, strict=True)]
                correct += int(_pick(lps) == doc.gold)
                correct_norm += int(_pick(per_byte) == doc.gold)
                done += 1
        if done == 0:
            return None
        name = self.tasks[index].name
        return EvalScore(name, index, correct / done, correct_norm / done, done, complete)


@dataclass(frozen=True, slots=True)
class _Doc:
    """A doc ready to score: its gold index, and per choice the tokens and continuation bytes."""

    gold: int
    tokens: list[ChoiceTokens]
    sizes: list[int]


def tokenizer_from_files(files: dict[str, bytes]) -> PreTrainedTokenizerBase:
    """Load the tokenizer of a model held as file bytes (``ModelKit.files``).

    The files are written to a temporary directory that `AutoTokenizer` reads (it keeps nothing
    on disk afterwards). Names must be plain file names: the files may come from peers, and a
    name with a path in it must not write outside that directory. No repository code is run.
    """
    with tempfile.TemporaryDirectory(prefix="psyche-tokenizer-") as tmp:
        for name, data in files.items():
            if not name or Path(name).name != name or name in (".", ".."):
                raise ValueError(f"model file name {name!r} is not a plain file name")
            (Path(tmp) / name).write_bytes(data)
        try:
            tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
                tmp, local_files_only=True
            )
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"cannot load a tokenizer from {sorted(files)}: {e}") from e
    return tokenizer
