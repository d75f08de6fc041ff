"""Find the files behind each entry of ``--eval-tasks`` and load them as `EvalTask`s.

An entry (the flag is a comma-separated list) is, in this order of precedence:

1. a local path: a ``.jsonl``/``.json`` file (its docs; few-shot examples come from the other docs)
   or a directory of them, searched recursively;
2. a built-in short name (`BUILTIN_TASKS`, e.g. ``hellaswag``, ``arc_easy``, ``mmlu``), which
   stands for a Hugging Face dataset repo, loaded as in 3;
3. a Hugging Face dataset repo id, optionally ``owner/name@config``, looked up **only in the local
   Hub cache** (``HF_HUB_CACHE``, else ``HF_HOME``/hub, read when the task is loaded): evals never
   download. A config selects the files under a folder of that name (``ARC-Easy/…``, ``all/…``).

Splits are named by the file name's start (``validation.jsonl``, ``test-00000-of-00001.json``) or
by the folder holding it (``validation/0000.parquet``): ``validation`` (also ``val``, ``valid``)
and ``test`` are scored, validation first, because public test splits often carry no labels
(HellaSwag's); ``train`` (else ``dev``) is the few-shot pool. Pass a file to score another split.
A directory holding exactly one data file uses it whatever its name. Several files of one split
(shards) are read in path order.

The task's name is the short name, else the file stem, directory name or repo name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from huggingface_hub import snapshot_download
from huggingface_hub.errors import LocalEntryNotFoundError

from psyche.evals.formats import read_docs
from psyche.evals.tasks import EvalTask, EvalTaskError, MultipleChoiceDoc

__all__ = ["BUILTIN_TASKS", "load_task", "load_tasks", "parse_task_list"]

BUILTIN_TASKS: dict[str, str] = {
    "hellaswag": "Rowan/hellaswag",
    "arc_easy": "allenai/ai2_arc@ARC-Easy",
    "arc_challenge": "allenai/ai2_arc@ARC-Challenge",
    "mmlu": "cais/mmlu@all",
}
"""Short names and the Hub dataset (``repo@config``) each stands for."""

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_SPLITS = {"validation": "validation", "valid": "validation", "val": "validation"}
_SPLITS |= {"test": "test", "train": "train", "dev": "dev"}
SCORED_SPLITS = ("validation", "test")
FEWSHOT_SPLITS = ("train", "dev")


def parse_task_list(spec: str) -> list[str]:
    """The entries of a comma-separated ``--eval-tasks`` value (blanks dropped)."""
    return [part.strip() for part in spec.split(",") if part.strip()]


def load_tasks(spec: str | Iterable[str]) -> tuple[EvalTask, ...]:
    """Every task of a comma-separated spec (or of a list of entries), in the order given."""
    entries = parse_task_list(spec) if isinstance(spec, str) else list(spec)
    if not entries:
        raise EvalTaskError("no eval tasks given")
    tasks = tuple(load_task(entry) for entry in entries)
    names = [t.name for t in tasks]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise EvalTaskError(f"task name(s) given more than once: {', '.join(dupes)}")
    return tasks


def load_task(entry: str) -> EvalTask:
    """The task one entry of ``--eval-tasks`` names (see the module docstring)."""
    path = Path(entry).expanduser()
    if path.exists():
        if path.is_file():
            return _task(path.stem, _read(path), ())
        return _from_directory(path.resolve().name, path, None, str(path))
    if entry.lower() in BUILTIN_TASKS:
        return _from_hub(entry.lower(), BUILTIN_TASKS[entry.lower()])
    repo = entry.partition("@")[0]
    if repo.count("/") == 1 and all(repo.split("/")):
        return _from_hub(repo.split("/")[1], entry)
    raise EvalTaskError(
        f"eval task {entry!r} is not a local file or directory, a built-in task "
        f"({', '.join(sorted(BUILTIN_TASKS))}) or a Hugging Face dataset id (owner/name[@config])"
    )


def _task(
    name: str, docs: list[MultipleChoiceDoc], pool: tuple[MultipleChoiceDoc, ...]
) -> EvalTask:
    if not docs:
        raise EvalTaskError(f"eval task {name!r} has no docs")
    return EvalTask(name, tuple(docs), pool)


def _read(path: Path) -> list[MultipleChoiceDoc]:
    if path.suffix not in DATA_SUFFIXES:
        raise EvalTaskError(f"{path}: eval task files must be {', '.join(DATA_SUFFIXES)}")
    return read_docs(path)


def _split_of(path: Path, root: Path) -> str | None:
    head = path.name.split(".")[0].split("-")[0].lower()
    if head in _SPLITS:
        return _SPLITS[head]
    folder = path.parent.name.lower() if path.parent != root else ""
    return _SPLITS.get(folder)


def _from_directory(name: str, root: Path, config: str | None, label: str) -> EvalTask:
    files = sorted(
        p
        for p in root.rglob("*")
        if p.suffix in DATA_SUFFIXES
        and p.is_file()
        # Caches and VCS folders (.cache/huggingface, .git) hold metadata, not data.
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    if config is not None:
        files = [p for p in files if config in p.relative_to(root).parts[:-1]]
        if not files:
            raise EvalTaskError(f"{label} has no data files under a folder named {config!r}")
    if not files:
        raise EvalTaskError(f"{label} holds no {', '.join(DATA_SUFFIXES)} files")
    by_split: dict[str, list[Path]] = {}
    for p in files:
        if (split := _split_of(p, root)) is not None:
            by_split.setdefault(split, []).append(p)
    scored = next((s for s in SCORED_SPLITS if s in by_split), None)
    if scored is None:
        if len(files) == 1:
            return _task(name, _read(files[0]), ())
        shown = ", ".join(str(p.relative_to(root)) for p in files[:8])
        raise EvalTaskError(
            f"{label} has no validation or test split among its files ({shown}); name the "
            "file to score directly"
        )
    docs = _read_split(by_split[scored])
    fewshot = next((s for s in FEWSHOT_SPLITS if s in by_split), None)
    pool = tuple(_read_split(by_split[fewshot])) if fewshot else ()
    return _task(name, docs, pool)


def _read_split(files: list[Path]) -> list[MultipleChoiceDoc]:
    # A split exported both ways (jsonl next to parquet) is read from the JSON, which needs no
    # optional dependency.
    json_files = [p for p in files if p.suffix != ".parquet"]
    return [doc for p in (json_files or files) for doc in _read(p)]


def hub_cache_dir() -> str | None:
    """The Hub cache in force now: ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else the default.

    huggingface_hub reads these once, at import; reading them per call honours a later change.
    """
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None


def _from_hub(name: str, spec: str) -> EvalTask:
    repo_id, _, config = spec.partition("@")
    cache = hub_cache_dir()
    try:
        snapshot = snapshot_download(
            repo_id, repo_type="dataset", cache_dir=cache, local_files_only=True
        )
    except LocalEntryNotFoundError as e:
        raise EvalTaskError(
            f"eval task {name!r}: dataset {repo_id} is not in the local Hugging Face cache "
            f"({cache or 'the default cache'}); evals never download, so fetch it first, e.g. "
            f"`hf download {repo_id} --repo-type dataset` with the same HF_HOME/HF_HUB_CACHE"
        ) from e
    except (OSError, ValueError) as e:  # HFValidationError (a ValueError) for a malformed id
        raise EvalTaskError(f"eval task {name!r}: cannot use dataset {repo_id}: {e}") from e
    return _from_directory(name, Path(str(snapshot)), config or None, f"dataset {spec}")
