"""Turn dataset records into `MultipleChoiceDoc`s, recognising the format from the record's fields.

Formats, tried in this order (the first whose key field is present decides):

- native (key ``context``): ``context`` (str), ``choices`` (list of str), ``gold`` (int);
- HellaSwag (key ``endings``): ``ctx`` or ``ctx_a`` + ``ctx_b``, ``endings``, ``label`` (int or
  digit string), and optionally ``activity_label``, which prefixes the context as
  ``"<activity>: <ctx>"``. WikiHow section markers (``[title]``, ``[step]``, …) are removed, as
  is usual for this dataset;
- ARC (key ``answerKey``): ``question``, ``choices: {text: [...], label: [...]}``, ``answerKey``
  (one of the labels). Context ``"Question: <question>\nAnswer:"``, choices the answer texts;
- MMLU (keys ``question`` and ``answer``): ``question``, ``choices`` (list), ``answer`` (int, or a
  letter A–D). Scored as in the original MMLU paper: the context lists the options as ``A. …``
  lines and ends in ``Answer:``; the choices are the letters.

Files are JSON Lines (``.jsonl``, also accepted for ``.json``) or a ``.json`` array of records.
Parquet is read only when ``pyarrow`` is installed, which psyche does not depend on. Every error
names the file and line (or record number) at fault.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from psyche.evals.tasks import EvalTaskError, MultipleChoiceDoc

__all__ = ["doc_from_record", "read_docs"]

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_WIKIHOW_MARKER = re.compile(r"\[[a-z]+\]")


def doc_from_record(record: Mapping[str, Any]) -> MultipleChoiceDoc:
    """The doc a record describes; `ValueError` (with what is wrong) for anything unusable."""
    if not isinstance(record, Mapping):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    if "context" in record:
        choices = _strings(_field(record, "choices"), "choices")
        return MultipleChoiceDoc(_text(record, "context"), choices, _field(record, "gold"))
    if "endings" in record:
        return _hellaswag(record)
    if "answerKey" in record:
        return _arc(record)
    if "question" in record and "answer" in record:
        return _mmlu(record)
    raise ValueError(
        f"unknown record format (fields: {', '.join(sorted(map(str, record)))}); expected "
        "native (context/choices/gold), HellaSwag (ctx/endings/label), ARC "
        "(question/choices/answerKey) or MMLU (question/choices/answer)"
    )


def _field(record: Mapping[str, Any], key: str) -> Any:
    if key not in record:
        raise ValueError(f"missing field {key!r}")
    return record[key]


def _text(record: Mapping[str, Any], key: str) -> str:
    value = _field(record, key)
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} must be a string, got {type(value).__name__}")
    return value


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(value)


def _index(value: Any, what: str) -> int:
    # Labels arrive as ints or as digit strings depending on who exported the dataset.
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{what} must be an integer, got {value!r}")


def _clean_wikihow(text: str) -> str:
    # HellaSwag's WikiHow contexts carry section markers; " [title]" ends a title sentence.
    text = text.strip().replace(" [title]", ". ")
    text = _WIKIHOW_MARKER.sub("", text)
    return re.sub(r" {2,}", " ", text).strip()


def _hellaswag(record: Mapping[str, Any]) -> MultipleChoiceDoc:
    if "ctx" in record:
        ctx = _text(record, "ctx")
    else:
        ctx = f"{_text(record, 'ctx_a').strip()} {_text(record, 'ctx_b').strip()}"
    context = _clean_wikihow(ctx)
    activity = record.get("activity_label")
    if isinstance(activity, str) and activity.strip():
        context = f"{activity.strip()}: {context}"
    endings = tuple(_clean_wikihow(e) for e in _strings(record["endings"], "endings"))
    return MultipleChoiceDoc(context, endings, _index(_field(record, "label"), "label"))


def _arc(record: Mapping[str, Any]) -> MultipleChoiceDoc:
    choices = record.get("choices")
    if not isinstance(choices, Mapping) or "text" not in choices or "label" not in choices:
        raise ValueError("ARC field 'choices' must be an object with 'text' and 'label' lists")
    texts = _strings(choices["text"], "choices.text")
    labels = _strings(choices["label"], "choices.label")
    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} choice texts but {len(labels)} labels")
    key = record["answerKey"]
    if key not in labels:
        raise ValueError(f"answerKey {key!r} is not one of the labels {list(labels)}")
    context = f"Question: {_text(record, 'question').strip()}\nAnswer:"
    return MultipleChoiceDoc(context, texts, labels.index(key))


def _mmlu(record: Mapping[str, Any]) -> MultipleChoiceDoc:
    options = _strings(_field(record, "choices"), "choices")
    if len(options) > len(_LETTERS):
        raise ValueError(f"{len(options)} choices is more than letters A-Z can name")
    letters = tuple(_LETTERS[: len(options)])
    answer = record["answer"]
    gold = letters.index(answer) if isinstance(answer, str) and answer in letters else None
    if gold is None:
        gold = _index(answer, "answer")
    lines = [_text(record, "question").strip()]
    lines += [
        f"{letter}. {option.strip()}" for letter, option in zip(letters, options, strict=True)
    ]
    return MultipleChoiceDoc("\n".join([*lines, "Answer:"]), letters, gold)


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) for every record in `path`; `where` is "file:line" or "file record N"."""
    if path.suffix == ".parquet":
        yield from _parquet_records(path)
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise EvalTaskError(f"cannot read {path}: {e}") from e
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise EvalTaskError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from e
        for n, item in enumerate(items, start=1):
            yield f"{path} record {n}", item
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{lineno}", json.loads(line)
        except json.JSONDecodeError as e:
            raise EvalTaskError(f"{path}:{lineno}: invalid JSON: {e.msg}") from e


def _parquet_records(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise EvalTaskError(
            f"{path} is a Parquet file and reading Parquet needs pyarrow, which is not installed "
            "(psyche does not depend on it): install pyarrow, or convert the split to JSON Lines "
            "and pass that file or directory instead"
        ) from e
    for n, row in enumerate(pq.read_table(path).to_pylist(), start=1):
        yield f"{path} row {n}", row


def read_docs(path: Path) -> list[MultipleChoiceDoc]:
    """Every doc in one data file."""
    docs = []
    for where, record in _records(path):
        try:
            docs.append(doc_from_record(record))
        except (ValueError, KeyError, TypeError) as e:
            raise EvalTaskError(f"{where}: malformed record: {e}") from e
    return docs
