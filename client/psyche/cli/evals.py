"""``psyche evals``: score a local model on multiple-choice tasks, offline.

* ``run`` loads a model directory through the client's loader and scores it on ``--tasks``
  (local jsonl/json files or directories, Hub datasets already in the local cache, or the
  built-in short names; see `psyche.evals.sources`), printing a table and optionally JSON;
* ``make-task`` writes the synthetic "continue the alphabet" task, which needs no download.

torch and transformers are imported inside the commands, so ``psyche --help`` stays fast.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from psyche.cli.checks import device_name
from psyche.cli.exit_codes import Mistake

if TYPE_CHECKING:  # torch and transformers: loaded by the command, after parsing
    from rich.console import Console
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from psyche.evals import EvalScore, EvalTask
from psyche.cli.input_files import InputFile

_DTYPES = ("float32", "bfloat16")


@click.group(name="evals")
def evals_group() -> None:
    """Evaluate models on multiple-choice tasks (HellaSwag, ARC, MMLU style); never downloads."""


@evals_group.command("run")
@click.option(
    "--model",
    "model_dir",
    type=InputFile(file_okay=False, inside=("config.json",), path_type=Path),
    required=True,
    help="A local Hugging Face model directory (config, safetensors, tokenizer).",
)
@click.option(
    "--tasks",
    required=True,
    help="Comma-separated tasks: files or directories of jsonl/json, cached Hub dataset ids "
    "(owner/name[@config]) or built-in names (hellaswag, arc_easy, arc_challenge, mmlu).",
)
@click.option("--fewshot", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--seed", type=int, default=42, show_default=True)
@click.option(
    "--max-docs",
    type=click.IntRange(min=1),
    default=None,
    help="Score at most N docs per task (the first N after a shuffle by --seed).",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    callback=device_name,
    help="torch device: cpu, cuda, cuda:N or mps.",
)
@click.option("--dtype", type=click.Choice(_DTYPES), default="float32", show_default=True)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the scores to this JSON file.",
)
def run_cmd(
    model_dir: Path,
    tasks: str,
    fewshot: int,
    seed: int,
    max_docs: int | None,
    batch_size: int,
    device: str,
    dtype: str,
    json_out: Path | None,
) -> None:
    """Score the model in MODEL on TASKS and print the accuracies."""
    from rich.console import Console

    from psyche.evals import EvalHarness

    console = Console()
    with console.status(f"loading {model_dir} and the tasks…"):
        loaded, model, tokenizer = _load(model_dir, tasks, device, dtype)
    harness = EvalHarness(
        loaded, tokenizer, fewshot=fewshot, seed=seed, max_docs=max_docs, batch_size=batch_size
    )
    total = sum(len(s) for s in harness.selected)
    with console.status(f"scoring {total} docs in {len(loaded)} task(s)…"):
        scores = harness.run(model)
    _report(console, scores, model_dir, fewshot, seed)
    if json_out is not None:
        report = {
            "model": str(model_dir),
            "tasks": tasks,
            "fewshot": fewshot,
            "seed": seed,
            "max_docs": max_docs,
            "scores": [asdict(s) for s in scores],
        }
        json_out.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"wrote {json_out}")


def _load(
    model_dir: Path, tasks: str, device: str, dtype: str
) -> tuple[tuple[EvalTask, ...], PreTrainedModel, PreTrainedTokenizerBase]:
    """The tasks, the model and its tokenizer. A task or a model folder that cannot be read, or
    a device that is not there, is the user's to change: one line and exit 2."""
    import torch
    from transformers.utils import logging as hf_logging

    from psyche.evals import EvalTaskError, load_tasks
    from psyche.protocol.model import LLMArchitecture
    from psyche.training import ModelLoadError, load_model

    # Its load reports would drown the table.
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        loaded = load_tasks(tasks)
        model, tokenizer = load_model(
            model_dir,
            device=torch.device(device),
            dtype=getattr(torch, dtype),
            architecture=LLMArchitecture.HfAuto,
        )
    except EvalTaskError as e:
        raise Mistake(f"--tasks: {e}") from e
    except ModelLoadError as e:
        raise Mistake(f"--model: {e}") from e
    except RuntimeError as e:  # an unavailable device, e.g. cuda on a CPU-only machine
        raise Mistake(f"--device: cannot use device {device!r}: {e}") from e
    if tokenizer is None:
        raise Mistake(f"--model {model_dir}: no tokenizer (tokenizer.json)")
    return loaded, model, tokenizer


def _report(
    console: Console, scores: list[EvalScore], model_dir: Path, fewshot: int, seed: int
) -> None:
    """The scores as a table: one row per task."""
    from rich.table import Table

    table = Table(title=f"{model_dir} · {fewshot}-shot · seed {seed}")
    for column in ("task", "docs", "accuracy", "accuracy (norm)"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for s in scores:
        table.add_row(s.task, str(s.docs), f"{s.accuracy:.4f}", f"{s.accuracy_norm:.4f}")
    console.print(table)


@evals_group.command("make-task")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--docs", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def make_task_cmd(out_dir: Path, docs: int, seed: int) -> None:
    """Write the synthetic "continue the alphabet" task into OUT_DIR (validation + train)."""
    from psyche.evals import write_synthetic_task

    paths = write_synthetic_task(out_dir, docs=docs, seed=seed)
    for path in paths:
        click.echo(f"wrote {path}")
    click.echo(f"score it with: psyche evals run --model DIR --tasks {out_dir}")
