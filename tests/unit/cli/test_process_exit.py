"""The processes' entry points end without the interpreter's teardown (psyche.cli.process_exit):
with the command's exit code, the logs and standard streams flushed, and only at the entry
points: a command run in-process still returns to its caller."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from psyche.cli import process_exit
from psyche.cli.exit_codes import CliGroup
from psyche.cli.process_exit import ProcessMain

ROOT = Path(__file__).resolve().parents[3]


class Exited(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(process_exit.os, "_exit", fake_exit)


@click.group(cls=CliGroup)
def group() -> None:
    """A group like psyche's."""


@group.command()
@click.argument("how")
def end(how: str) -> None:
    if how == "text":
        sys.exit("a message")
    if how == "code":
        sys.exit(7)
    click.echo("done")


@pytest.mark.parametrize(
    ("args", "code", "err"),
    [
        (["end", "ok"], 0, ""),
        (["end", "code"], 7, ""),
        (["end", "text"], 1, "a message"),
        (["nope"], 2, "No such command"),
    ],
)
def test_the_entry_point_exits_with_the_commands_code(
    exits: None, capsys: pytest.CaptureFixture[str], args: list[str], code: int, err: str
) -> None:
    with pytest.raises(Exited) as e:
        ProcessMain(group)(args, prog_name="g")
    assert e.value.code == code
    assert err in capsys.readouterr().err


def test_a_command_run_in_process_returns_to_its_caller(exits: None) -> None:
    from psyche.cli.main import cli

    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and "psyche" in result.output


def test_every_console_script_of_the_cli_is_a_process_main_of_its_group() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    cli_scripts = {n: t for n, t in scripts.items() if t.startswith("psyche.cli.")}
    assert len(cli_scripts) == 6, cli_scripts
    for name, target in cli_scripts.items():
        module, attr = target.split(":")
        main = getattr(importlib.import_module(module), attr)
        assert isinstance(main, ProcessMain) and isinstance(main.command, click.Group), name


def test_logs_and_piped_output_are_flushed_before_the_process_ends(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    code = (
        "import logging\n"
        "from psyche.cli.process_exit import exit_now\n"
        f"logging.getLogger().addHandler(logging.FileHandler({str(log)!r}))\n"
        "logging.getLogger().warning('the last line')\n"
        "print('on stdout', end='')\n"
        "exit_now(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "on stdout"
    assert log.read_text() == "the last line\n"
