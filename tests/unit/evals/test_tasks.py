"""Task loading: each record format, splits of a directory, errors naming the file and line, the
max-docs cap, and datasets found only in a (fake) local Hugging Face cache."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from psyche.evals import (
    EvalTask,
    EvalTaskError,
    MultipleChoiceDoc,
    doc_from_record,
    load_task,
    load_tasks,
    parse_task_list,
    select_docs,
)

NATIVE = {"context": "2 + 2 =", "choices": ["3", "4", "5"], "gold": 1}
HELLASWAG = {
    "activity_label": "Baking cookies",
    "ctx_a": "A woman puts dough on a tray.",
    "ctx_b": "she",
    "endings": ["puts it in the oven.", "eats the tray.", "sings [title] loudly.", "leaves."],
    "label": "0",
}
ARC = {
    "question": "Which is a mammal?",
    "choices": {"text": ["shark", "whale", "trout"], "label": ["A", "B", "C"]},
    "answerKey": "B",
}
MMLU = {
    "question": "What is 2 * 3?",
    "subject": "math",
    "choices": ["5", "6", "7", "8"],
    "answer": 1,
}


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_native_record() -> None:
    assert doc_from_record(NATIVE) == MultipleChoiceDoc("2 + 2 =", ("3", "4", "5"), 1)


def test_hellaswag_record_joins_and_cleans_the_context() -> None:
    doc = doc_from_record(HELLASWAG)
    assert doc.context == "Baking cookies: A woman puts dough on a tray. she"
    assert doc.choices[2] == "sings. loudly."  # the WikiHow marker is gone
    assert doc.gold == 0
    with_ctx = doc_from_record({"ctx": "He runs [step] fast", "endings": ["a", "b"], "label": 1})
    assert with_ctx == MultipleChoiceDoc("He runs fast", ("a", "b"), 1)


def test_arc_record_maps_the_answer_key_to_its_label() -> None:
    doc = doc_from_record(ARC)
    assert doc == MultipleChoiceDoc(
        "Question: Which is a mammal?\nAnswer:", ("shark", "whale", "trout"), 1
    )
    numeric = {**ARC, "choices": {"text": ["x", "y"], "label": ["1", "2"]}, "answerKey": "2"}
    assert doc_from_record(numeric).gold == 1


def test_mmlu_record_scores_the_letters() -> None:
    doc = doc_from_record(MMLU)
    assert doc.context == "What is 2 * 3?\nA. 5\nB. 6\nC. 7\nD. 8\nAnswer:"
    assert doc.choices == ("A", "B", "C", "D")
    assert doc.gold == 1
    assert doc_from_record({**MMLU, "answer": "C"}).gold == 2


def test_a_json_array_file_and_a_single_jsonl_file(tmp_path: Path) -> None:
    (tmp_path / "arr.json").write_text(json.dumps([NATIVE, ARC]))
    task = load_task(str(tmp_path / "arr.json"))
    assert task.name == "arr"
    assert [d.gold for d in task.docs] == [1, 1]
    assert task.fewshot_pool == ()  # a single file: few-shot examples come from the other docs
    single = load_task(str(write_jsonl(tmp_path / "mine.jsonl", [NATIVE, MMLU, HELLASWAG])))
    assert single.name == "mine" and len(single.docs) == 3


def test_a_directory_scores_validation_and_draws_fewshot_from_train(tmp_path: Path) -> None:
    root = tmp_path / "quiz"
    write_jsonl(root / "validation.jsonl", [NATIVE] * 3)
    write_jsonl(root / "test.jsonl", [MMLU] * 5)
    write_jsonl(root / "train-00000-of-00002.jsonl", [ARC])
    write_jsonl(root / "train-00001-of-00002.jsonl", [ARC, ARC])
    write_jsonl(root / "dev.jsonl", [HELLASWAG])
    task = load_task(str(root))
    assert task.name == "quiz"
    assert len(task.docs) == 3 and task.docs[0].context == "2 + 2 ="
    assert len(task.fewshot_pool) == 3 and task.fewshot_pool[0].context.startswith("Question:")


def test_a_directory_falls_back_to_test_and_dev_and_split_folders(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a" / "test.jsonl", [MMLU] * 2)
    write_jsonl(tmp_path / "a" / "dev.jsonl", [NATIVE])
    task = load_task(str(tmp_path / "a"))
    assert len(task.docs) == 2 and task.fewshot_pool == (doc_from_record(NATIVE),)
    # Split named by its folder, as in Hub parquet conversions (default/validation/0000.json).
    write_jsonl(tmp_path / "b" / "default" / "validation" / "0000.json", [ARC])
    assert load_task(str(tmp_path / "b")).docs == (doc_from_record(ARC),)
    # One data file whatever its name.
    write_jsonl(tmp_path / "c" / "questions.jsonl", [ARC, ARC])
    assert len(load_task(str(tmp_path / "c")).docs) == 2


def test_a_directory_without_a_scored_split_is_refused(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d" / "train.jsonl", [NATIVE])
    write_jsonl(tmp_path / "d" / "other.jsonl", [NATIVE])
    with pytest.raises(EvalTaskError, match="no validation or test split"):
        load_task(str(tmp_path / "d"))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "invalid JSON"),
        (json.dumps({**NATIVE, "gold": 7}), "gold 7 is not an index"),
        (json.dumps({"context": "x", "gold": 0}), "missing field 'choices'"),
        (json.dumps({**ARC, "answerKey": "Z"}), "answerKey 'Z' is not one of the labels"),
        (json.dumps({"prompt": "x", "target": 1}), r"unknown record format \(fields: prompt"),
        (json.dumps({**HELLASWAG, "label": ""}), "label must be an integer"),
        (json.dumps([1, 2]), "expected a JSON object"),
    ],
)
def test_malformed_records_name_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(NATIVE) + "\n\n" + line + "\n")
    with pytest.raises(EvalTaskError, match=message) as err:
        load_task(str(path))
    assert f"{path}:3" in str(err.value)


def test_malformed_json_array_names_the_record(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([NATIVE, {**NATIVE, "choices": "abc"}]))
    with pytest.raises(EvalTaskError, match=r"bad.json record 2: .*choices must be a list"):
        load_task(str(path))


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow installed")
def test_parquet_without_pyarrow_says_what_is_needed(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "validation-00000-of-00001.parquet").write_bytes(b"PAR1")
    with pytest.raises(EvalTaskError, match="Parquet needs pyarrow"):
        load_task(str(tmp_path / "p"))


def test_select_docs_is_a_seeded_deterministic_cap() -> None:
    assert select_docs(10, None, seed=1) == tuple(range(10))
    assert select_docs(10, 10, seed=1) == tuple(range(10))
    a = select_docs(100, 10, seed=42)
    assert a == select_docs(100, 10, seed=42)
    assert len(set(a)) == 10 and all(0 <= i < 100 for i in a)
    assert a != select_docs(100, 10, seed=43)
    assert a != tuple(range(10))  # a shuffle, not the head of the file
    # A larger cap extends the same order, so raising it never drops a doc already scored.
    assert select_docs(100, 20, seed=42)[:10] == a
    with pytest.raises(ValueError, match="at least 1"):
        select_docs(10, 0, seed=1)


def test_task_lists(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [NATIVE])
    b = write_jsonl(tmp_path / "b.jsonl", [ARC])
    assert parse_task_list(f" {a}, ,{b} ") == [str(a), str(b)]
    assert [t.name for t in load_tasks(f"{a},{b}")] == ["a", "b"]
    with pytest.raises(EvalTaskError, match="more than once: a"):
        load_tasks(f"{a},{a}")
    with pytest.raises(EvalTaskError, match="no eval tasks"):
        load_tasks(" , ")
    with pytest.raises(EvalTaskError, match="not a local file or directory, a built-in task"):
        load_tasks("no-such-thing")
    with pytest.raises(ValueError, match="has no docs"):
        EvalTask("empty", ())


# ---- The local Hugging Face cache ------------------------------------------------------------


def fake_hub_dataset(cache: Path, repo_id: str, files: dict[str, list[Any]]) -> Path:
    """A dataset snapshot in huggingface_hub's cache layout:
    ``datasets--owner--name/{refs/main, snapshots/<commit>/<files>}``."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = cache / ("datasets--" + repo_id.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    snapshot = repo_dir / "snapshots" / commit
    for name, records in files.items():
        write_jsonl(snapshot / name, records)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_built_in_name_is_read_from_the_cache_with_its_config(hub_cache: Path) -> None:
    fake_hub_dataset(
        hub_cache,
        "allenai/ai2_arc",
        {
            "ARC-Easy/validation-00000-of-00001.jsonl": [ARC] * 4,
            "ARC-Easy/train-00000-of-00001.jsonl": [ARC] * 2,
            "ARC-Challenge/validation-00000-of-00001.jsonl": [ARC] * 9,
        },
    )
    easy = load_task("arc_easy")
    assert easy.name == "arc_easy"
    assert len(easy.docs) == 4 and len(easy.fewshot_pool) == 2
    assert len(load_task("ARC_Challenge").docs) == 9
    by_id = load_task("allenai/ai2_arc@ARC-Easy")
    assert by_id.name == "ai2_arc" and by_id.docs == easy.docs
    with pytest.raises(EvalTaskError, match="no data files under a folder named 'nope'"):
        load_task("allenai/ai2_arc@nope")


def test_hf_home_locates_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    fake_hub_dataset(tmp_path / "home" / "hub", "me/quiz", {"validation.jsonl": [NATIVE]})
    task = load_task("me/quiz")
    assert task.name == "quiz" and task.docs == (doc_from_record(NATIVE),)


def test_a_dataset_missing_from_the_cache_says_how_to_get_it(hub_cache: Path) -> None:
    with pytest.raises(EvalTaskError) as err:
        load_task("hellaswag")
    message = str(err.value)
    assert "Rowan/hellaswag is not in the local Hugging Face cache" in message
    assert "hf download Rowan/hellaswag --repo-type dataset" in message
    assert str(hub_cache) in message
