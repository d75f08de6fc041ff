"""``psyche evals``: make the synthetic task, then score a tiny model directory on it, offline."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from psyche.cli.evals import evals_group
from psyche.training import Preset, write_model_dir

TINY = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=64)


def test_make_task_then_run(tmp_path: Path) -> None:
    model = write_model_dir(tmp_path / "model", preset=TINY, seed=0).path
    runner = CliRunner()
    made = runner.invoke(
        evals_group, ["make-task", str(tmp_path / "alphabet"), "--docs", "20", "--seed", "3"]
    )
    assert made.exit_code == 0, made.output
    validation = (tmp_path / "alphabet" / "validation.jsonl").read_text().splitlines()
    assert len(validation) == 20
    assert set(json.loads(validation[0])) == {"context", "choices", "gold"}
    assert len((tmp_path / "alphabet" / "train.jsonl").read_text().splitlines()) == 80

    # The task twice under two names: a directory (with its train split) and its scored file.
    tasks = f"{tmp_path / 'alphabet'},{tmp_path / 'alphabet' / 'validation.jsonl'}"
    out = tmp_path / "scores.json"
    args = ["run", "--model", str(model), "--tasks", tasks, "--fewshot", "1", "--seed", "5"]
    ran = runner.invoke(evals_group, [*args, "--max-docs", "12", "--json", str(out)])
    assert ran.exit_code == 0, ran.output
    assert "alphabet" in ran.output and "validation" in ran.output
    report = json.loads(out.read_text())
    assert (report["fewshot"], report["seed"], report["max_docs"]) == (1, 5, 12)
    scores = report["scores"]
    assert [(s["task"], s["index"], s["docs"], s["complete"]) for s in scores] == [
        ("alphabet", 0, 12, True),
        ("validation", 1, 12, True),
    ]
    for s in scores:
        # Accuracies are fractions of the 12 docs.
        assert 0.0 <= s["accuracy"] <= 1.0 and round(s["accuracy"] * 12, 6).is_integer()
        assert 0.0 <= s["accuracy_norm"] <= 1.0

    # The same seed gives the same scores.
    again = runner.invoke(evals_group, [*args, "--max-docs", "12", "--json", str(out)])
    assert again.exit_code == 0 and json.loads(out.read_text())["scores"] == scores


def test_a_bad_task_is_a_clear_error(tmp_path: Path) -> None:
    model = write_model_dir(tmp_path / "model", preset=TINY, seed=0).path
    ran = CliRunner().invoke(evals_group, ["run", "--model", str(model), "--tasks", "nope"])
    assert ran.exit_code == 2  # the user's to change (README, "Troubleshooting")
    assert "not a local file or directory, a built-in task" in ran.output
