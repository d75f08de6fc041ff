"""`validate-config` on configs that used to pass and then kill every client at load (issue 12,
finding 5), on files that are not a config at all (mutants of the shipped state file: never a
traceback, always one line), and its warnings for a witness quorum one member can reach."""

from __future__ import annotations

import importlib.util
import random
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psyche.cli.server import server

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "config" / "tiny" / "state.toml"
TEXT = TINY.read_text()


@cache
def probe() -> ModuleType:
    path = ROOT / "scripts" / "probe_config_mutants.py"
    spec = importlib.util.spec_from_file_location("probe_config_mutants", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(server, ["validate-config", *args], env=env)


def edited(tmp_path: Path, old: str, new: str) -> Path:
    assert TEXT.count(old) == 1, old
    path = tmp_path / "state.toml"
    path.write_text(TEXT.replace(old, new))
    return path


def one_line_error(result: Result, *, unreadable: bool = False) -> str:
    """The one line of a config that breaks a rule (exit 1, ``invalid config: …``), or with
    ``unreadable`` of a file that is not TOML or not UTF-8 at all (exit 2, ``error: FLAG …``)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == (2 if unreadable else 1), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: --" if unreadable else "invalid config: ")
    return lines[0]


DECAY = "compression_decay = 0.999"
CLIP = "clip_grad_norm = 1.0"
BASE_LR = "base_lr = 4.0e-3"
LR_STEPS = "total_steps = 10\nfinal_lr"
OPT = "model.LLM.optimizer.Distro"
LR = "model.LLM.lr_schedule.Cosine"


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (DECAY, "compression_decay = 1.5", f"{OPT}.compression_decay (1.5)"),
        (DECAY, "compression_decay = -0.5", f"{OPT}.compression_decay (-0.5)"),
        (DECAY, "compression_decay = nan", f"{OPT}.compression_decay (nan)"),
        (DECAY, "compression_decay = inf", f"{OPT}.compression_decay (inf)"),
        (CLIP, "clip_grad_norm = nan", f"{OPT}.clip_grad_norm (nan)"),
        (CLIP, "clip_grad_norm = -inf", f"{OPT}.clip_grad_norm (-inf)"),
        (CLIP, "clip_grad_norm = 1e39", f"{OPT}.clip_grad_norm (1e+39)"),
        (CLIP, "clip_grad_norm = 1.0\nweight_decay = -1.0", f"{OPT}.weight_decay (-1.0)"),
        (BASE_LR, "base_lr = -4.0e-3", f"{LR}.base_lr (-0.004)"),
        (BASE_LR, "base_lr = nan", f"{LR}.base_lr (nan)"),
        (BASE_LR, "base_lr = inf", f"{LR}.base_lr (inf)"),
        ("warmup_init_lr = 0.0", "warmup_init_lr = -inf", f"{LR}.warmup_init_lr (-inf)"),
        ("final_lr = 4.0e-4", "final_lr = nan", f"{LR}.final_lr (nan)"),
        (LR_STEPS, "total_steps = 0\nfinal_lr", f"{LR}.total_steps must be at least 1"),
        ('run_state = "WaitingForMembers"', 'run_state = "Bogus"', "run_state ('Bogus')"),
        ('run_state = "WaitingForMembers"', 'run_state = "Paused"', "run_state ('Paused')"),
        ('"127.0.0.1:20001"', '"nonsense"', "model.LLM.data_location.Server ('nonsense')"),
        ('"127.0.0.1:20001"', '"127.0.0.1:0"', "model.LLM.data_location.Server"),
        ('"127.0.0.1:20001"', '"127.0.0.1:200001"', "model.LLM.data_location.Server"),
        ('"127.0.0.1:20001"', '"http://127.0.0.1:20001"', "model.LLM.data_location.Server"),
        (
            'Server = "127.0.0.1:20001"',
            'Http = { location = { SingleUrl = "tokens.bin" }, '
            'token_size_in_bytes = "TwoBytes", shuffle = "DontShuffle" }',
            "model.LLM.data_location.Http.location.SingleUrl ('tokens.bin')",
        ),
        (
            'architecture = "HfLlama"',
            'architecture = "Torchtitan"',
            "model.LLM.architecture (Torchtitan) is not supported by this client",
        ),
    ],
)
def test_configs_that_killed_every_client_are_refused(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    line = one_line_error(invoke("--state", str(edited(tmp_path, old, new))))
    assert line.startswith(f"invalid config: {field}"), line


def test_shipped_configs_pass_every_rule() -> None:
    data = str(TINY.parent / "data.toml")
    for state in (TINY, ROOT / "config" / "tiny-solana" / "state.toml"):
        result = invoke("--state", str(state), "--data-config", data)
        assert result.exit_code == 0, result.output
    seed = ROOT / "config" / "seed-sample" / "config.toml"
    result = invoke("--state", str(seed), "--run-id", "seed")
    assert result.exit_code == 0, result.output


def test_data_config_must_match_the_model_as_the_server_requires(tmp_path: Path) -> None:
    data = tmp_path / "data.toml"
    data.write_text((TINY.parent / "data.toml").read_text().replace("seq_len = 64", "seq_len = 32"))
    line = one_line_error(invoke("--state", str(TINY), "--data-config", str(data)))
    assert "seq_len (32) must equal the run's model.LLM.max_seq_len (64)" in line


def test_a_state_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "state.toml"
    path.write_bytes(TINY.read_bytes().replace(b'"tiny"', b'"ti\xffny"'))
    line = one_line_error(invoke("--state", str(path)), unreadable=True)
    offset = TINY.read_bytes().index(b'"tiny"') + 3
    assert line.endswith(f"not UTF-8 text (byte 0xff at offset {offset})"), line
    data = tmp_path / "data.toml"
    data.write_bytes(b"\xfe" + (TINY.parent / "data.toml").read_bytes())
    line = one_line_error(invoke("--state", str(TINY), "--data-config", str(data)), unreadable=True)
    assert "not UTF-8 text (byte 0xfe at offset 0)" in line


def test_file_contents_are_text_not_markup(tmp_path: Path) -> None:
    # A value that looks like rich markup ("[/]" closes nothing) used to raise MarkupError.
    result = invoke("--state", str(edited(tmp_path, '"runs/tiny/model"', '"[/]"')))
    assert result.exit_code == 0, result.output
    assert "'repo_id': '[/]'" in result.stdout
    line = one_line_error(
        invoke("--state", str(edited(tmp_path, "[config]", "[config]\n'[/]' = 1")))
    )
    assert line == "invalid config: config.[/]: unknown key (expected one of: " + ", ".join(
        ["warmup_time", "cooldown_time", "max_round_train_time", "round_witness_time",
         "global_batch_size_warmup_tokens", "epoch_time", "total_steps", "init_min_clients",
         "min_clients", "witness_nodes", "global_batch_size_start", "global_batch_size_end",
         "verification_percent", "waiting_for_members_extra_time"]
    ) + ")"  # fmt: skip


def test_control_characters_in_an_error_stay_on_one_line(tmp_path: Path) -> None:
    path = edited(tmp_path, "[config]", '[config]\n"a\\nb\\u001b[31m" = 1')
    line = one_line_error(invoke("--state", str(path)))
    assert line.startswith("invalid config: config.a\\nb\\x1b[31m: unknown key"), line


def test_seeded_mutants_end_in_acceptance_or_one_line(tmp_path: Path) -> None:
    """400 seeded mutants of the shipped state file (byte flips, truncations, deleted or inserted
    bytes, duplicated lines, values swapped for NaN, markup, huge integers...). Before the fix 107
    of these raised a traceback (UnicodeDecodeError, MarkupError)."""
    p = probe()
    rng = random.Random(12)
    base = TINY.read_bytes()
    outcomes: dict[str, int] = {}
    for _ in range(400):
        mutant = p.mutate(base, rng)
        outcome, detail = p.classify(mutant, tmp_path / "state.toml")
        assert outcome in ("accepted", "error"), (outcome, detail, mutant)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes["error"] > 300 and outcomes["accepted"] > 0, outcomes


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    at=st.integers(0, len(TEXT.encode())), junk=st.binary(min_size=1, max_size=6), cut=st.booleans()
)
def test_inserted_bytes_never_raise(tmp_path: Path, at: int, junk: bytes, cut: bool) -> None:
    base = TINY.read_bytes()
    mutant = base[:at] + junk + (b"" if cut else base[at:])
    outcome, detail = probe().classify(mutant, tmp_path / "state.toml")
    assert outcome in ("accepted", "error"), (outcome, detail, mutant)


# --- warnings: a quorum that one member can reach ------------------------------------------------


def warnings_of(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if "warning: " in line]


@pytest.mark.parametrize(
    ("nodes", "says"),
    [
        (1, "config.witness_nodes = 1: the witness quorum is 1, so one witness alone decides"),
        (0, "config.witness_nodes = 0: every client witnesses and the quorum follows the number"),
        (2, "config.witness_nodes = 2: the quorum is 2 of 2, so one elected witness that"),
    ],
)
def test_a_quorum_of_one_is_a_yellow_warning_not_an_error(
    tmp_path: Path, nodes: int, says: str
) -> None:
    path = edited(tmp_path, "witness_nodes = 2", f"witness_nodes = {nodes}")
    result = invoke("--state", str(path), env={"FORCE_COLOR": "1", "TERM": "xterm"})
    assert result.exit_code == 0, result.output
    (line,) = warnings_of(result)
    assert says in line
    assert line.startswith("\x1b[33mwarning: "), repr(line)  # yellow (ANSI 33)
    assert "is valid" in result.stdout


def test_three_witnesses_give_no_warning(tmp_path: Path) -> None:
    text = TINY.read_text().replace("min_clients = 2", "min_clients = 3")
    path = tmp_path / "state.toml"
    path.write_text(text.replace("witness_nodes = 2", "witness_nodes = 3"))
    result = invoke("--state", str(path))
    assert result.exit_code == 0 and warnings_of(result) == [], result.stderr
