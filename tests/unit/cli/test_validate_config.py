"""`psyche-centralized-server validate-config`: exit codes and messages a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from psyche.cli.server import server

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "config" / "tiny" / "state.toml"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(server, ["validate-config", *args])
    return result.exit_code, result.output


def test_shipped_tiny_config_is_valid_with_summary() -> None:
    code, out = run("--state", str(TINY), "--data-config", str(TINY.parent / "data.toml"))
    assert code == 0, out
    assert "run 'tiny' is valid" in out
    assert "DisTrO chunk 64" in out


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "warmup_time = 60",
            "warmup_time = 240",
            "config.warmup_time (240) must be less than config.epoch_time (240)",
        ),
        ("min_clients = 2", "min_clients = 0", "config.min_clients must be greater than 0"),
        (
            "witness_nodes = 2",
            "witness_nodes = 3",
            "config.witness_nodes (3) must be at most config.min_clients (2)",
        ),
        (
            "total_steps = 10\nwait",
            "total_steps = -1\nwait",
            "config.total_steps: -1 is out of range",
        ),
        ("max_seq_len = 64", "max_seq_len = 0", "model.LLM.max_seq_len must be greater than 0"),
        ('run_id = "tiny"', 'run_id = "' + "x" * 33 + '"', "must be at most 32 bytes"),
        ("quantize_1bit = true", "quantize_1bit = 1", "quantize_1bit: expected true or false"),
        ('architecture = "HfLlama"', 'architecture = "Gpt9"', "architecture: 'Gpt9' is not one of"),
        ("[config]", "[config]\nbogus = 1", "config.bogus: unknown key"),
        (
            "verification_percent = 0",
            "verification_percent = 101",
            "verification_percent (101) must be at most 100",
        ),
    ],
)
def test_invalid_config_names_key_and_rule(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    text = TINY.read_text()
    assert old in text
    bad = tmp_path / "state.toml"
    bad.write_text(text.replace(old, new, 1))
    code, out = run("--state", str(bad))
    assert code == 1
    assert message in out


def test_malformed_toml_and_missing_file(tmp_path: Path) -> None:
    # A file that cannot be read or parsed is the user's to fix, as in every command (exit 2);
    # a well-formed one that breaks a rule is "invalid config" (exit 1, above).
    bad = tmp_path / "state.toml"
    bad.write_text("run_id = [[[\n")
    code, out = run("--state", str(bad))
    assert code == 2 and f"error: --state {bad}: malformed TOML" in out
    code, out = run("--state", str(tmp_path / "nope.toml"))
    assert code == 2 and "No such file or directory" in out


def test_missing_run_id_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "state.toml"
    bad.write_text(TINY.read_text().replace('run_id = "tiny"\n', ""))
    code, out = run("--state", str(bad))
    assert code == 1 and "run_id: missing key" in out


def test_a_solana_run_config_without_run_id_takes_one_from_the_command_line() -> None:
    sample = Path(__file__).resolve().parents[3] / "config" / "seed-sample" / "config.toml"
    code, out = run("--state", str(sample), "--run-id", "seed")
    assert code == 0 and "run 'seed' is valid" in out
    code, out = run("--state", str(sample))
    assert code == 1 and "--run-id" in out
