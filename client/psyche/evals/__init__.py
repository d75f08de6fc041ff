"""Evaluate a model on multiple-choice tasks (HellaSwag, ARC, MMLU style) by log-likelihood.

Modules: `tasks` (docs, tasks and the ``max_docs`` cap), `formats` (dataset records to docs),
`sources` (``--eval-tasks`` entries: local files, the local Hub cache, built-in short names),
`scoring` (tokenization, left truncation, batched continuation log-probabilities), `harness`
(prompts with few-shot examples and the accuracies) and `synth` (a small task made locally).

Evals never download: Hub datasets are read from the local cache only.
Imports only `psyche.training` and `psyche.protocol` from this package.
"""

from psyche.evals.formats import doc_from_record, read_docs
from psyche.evals.harness import (
    FEWSHOT_SEPARATOR,
    EvalHarness,
    EvalScore,
    continuation_text,
    tokenizer_from_files,
)
from psyche.evals.sources import BUILTIN_TASKS, load_task, load_tasks, parse_task_list
from psyche.evals.synth import synthetic_docs, write_synthetic_task
from psyche.evals.tasks import EvalTask, EvalTaskError, MultipleChoiceDoc, select_docs

__all__ = [
    "BUILTIN_TASKS",
    "FEWSHOT_SEPARATOR",
    "EvalHarness",
    "EvalScore",
    "EvalTask",
    "EvalTaskError",
    "MultipleChoiceDoc",
    "continuation_text",
    "doc_from_record",
    "load_task",
    "load_tasks",
    "parse_task_list",
    "read_docs",
    "select_docs",
    "synthetic_docs",
    "tokenizer_from_files",
    "write_synthetic_task",
]
