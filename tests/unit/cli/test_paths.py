"""Paths a command receives are absolute from where it starts (issue 37)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from psyche.cli.paths import AbsolutePath, absolute_entries
from psyche.testnet.base import NetOptions


def test_a_relative_path_flag_is_absolute_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Path] = []

    @click.command()
    @click.option("--out", type=AbsolutePath(file_okay=False))
    def cmd(out: Path) -> None:
        seen.append(out)

    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(cmd, ["--out", "runs/x"]).exit_code == 0
    assert seen == [tmp_path / "runs" / "x"]


def test_click_checks_and_messages_see_the_path_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @click.command()
    @click.option("--state", type=AbsolutePath(exists=True, dir_okay=False))
    def cmd(state: Path) -> None:
        pass

    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cmd, ["--state", "missing.toml"])
    assert res.exit_code == 2
    assert "'missing.toml' does not exist" in res.output


def test_net_options_hold_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    o = NetOptions(config_path=Path("cfg"), out_dir=Path("net"), summary_path=Path("s.json"))
    assert (o.config_path, o.out_dir, o.summary_path) == (
        tmp_path / "cfg",
        tmp_path / "net",
        tmp_path / "s.json",
    )
    assert o.checkpoint_dir is None and o.write_distro_data is None


def test_eval_task_paths_are_absolute_and_names_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "task").mkdir()
    assert absolute_entries("hellaswag,task") == f"hellaswag,{tmp_path / 'task'}"
    assert absolute_entries(None) is None


def test_a_clients_checkpoint_folder_is_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hub upload runs in a child process: it gets the folder as an absolute path."""
    from psyche.cli.daemon_options import take_checkpoint_and_sharing

    monkeypatch.chdir(tmp_path)
    kw = {
        "checkpoint_dir": "ckpt",
        "hub_repo": None,
        "max_concurrent_parameter_requests": 8,
        "parameter_request_timeout": 30.0,
        "keep_steps": 3,
    }
    checkpoint, _ = take_checkpoint_and_sharing(kw)
    assert checkpoint.checkpoint_dir == str(tmp_path / "ckpt")
