"""The run-config rules at the entry points besides validate-config: the centralized server (its
`run` command, the advisories it logs, the saved state it restores) and Solana's update-config.
The rules themselves are pinned by tests/vectors/config/validity.json."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from psyche.backends.centralized.app import load_coordinator
from psyche.backends.centralized.state_store import StateStore
from psyche.cli.server import server as server_cli
from psyche.coordinator import state_json as serde
from psyche.protocol.strict_obj import ConfigError
from psyche.solana.programs import coordinator_commands as admin

from .support import make_coordinator

TINY = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"


@pytest.fixture
def keep_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def tiny_with(tmp_path: Path, old: str, new: str) -> Path:
    text = TINY.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "state.toml"
    path.write_text(text.replace(old, new))
    return path


# The old server accepted these files and served them until killed: the timeout makes that a
# failure instead of a hang.
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "compression_decay = 0.999",
            "compression_decay = nan",
            "model.LLM.optimizer.Distro.compression_decay (nan) must be a finite number in [0, 1]",
        ),
        (
            "base_lr = 4.0e-3",
            "base_lr = -inf",
            "model.LLM.lr_schedule.Cosine.base_lr (-inf) must be a finite number >= 0",
        ),
        (
            'Server = "127.0.0.1:20001"',
            'Server = "127.0.0.1"',
            "model.LLM.data_location.Server ('127.0.0.1') must be host:port",
        ),
    ],
)
def test_the_server_refuses_to_start_a_run_every_client_would_fail(
    tmp_path: Path, keep_logging: None, old: str, new: str, message: str
) -> None:
    state = tiny_with(tmp_path, old, new)
    data = TINY.parent / "data.toml"
    result = CliRunner().invoke(
        server_cli,
        [
            "run",
            "--state",
            str(state),
            "--data-config",
            str(data),
            "--tui",
            "false",
            "--host",
            "127.0.0.1",
            "--server-port",
            "0",
        ],
    )
    assert result.exit_code == 1, result.output
    assert f"cannot start the server: {message}" in " ".join(result.output.split())


def test_the_server_logs_a_quorum_of_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tiny_with(tmp_path, "witness_nodes = 2", "witness_nodes = 1")
    with caplog.at_level(logging.WARNING):
        c = load_coordinator(state)
    assert c.config.witness_nodes == 1
    assert any(
        "config.witness_nodes = 1: the witness quorum is 1" in r.message for r in caplog.records
    )


def test_a_restart_skips_a_saved_state_whose_checkpoint_no_client_can_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path, "tiny")
    older = make_coordinator()
    older.progress.step = 3
    store.save(older)
    newer = make_coordinator()
    newer.progress.step = 8
    path = store.save(newer)
    obj = json.loads(path.read_text())
    obj["model"]["LLM"]["checkpoint"] = {"Hub": {"repo_id": "", "revision": None}}
    path.write_text(json.dumps(obj))
    serde.from_json(path.read_bytes())  # the file still decodes; only the rule refuses it
    with caplog.at_level(logging.WARNING):
        found = store.load_newest()
    assert found is not None and found[0].progress.step == 3
    assert any(
        "model.LLM.checkpoint.Hub.repo_id must not be empty" in r.message for r in caplog.records
    )


def test_update_config_checks_the_file_before_any_rpc(tmp_path: Path) -> None:
    bad = tiny_with(tmp_path, "clip_grad_norm = 1.0", "clip_grad_norm = inf")
    # No session at all: the file is refused before anything would use one.
    with pytest.raises(ConfigError, match=r"^model.LLM.optimizer.Distro.clip_grad_norm \(inf\)"):
        asyncio.run(admin.update_config(None, "tiny", config_path=str(bad)))  # type: ignore[arg-type]
    paused = tiny_with(tmp_path, 'run_state = "WaitingForMembers"', 'run_state = "Paused"')
    with pytest.raises(ConfigError, match=r"^run_state \('Paused'\) must be 'WaitingForMembers'"):
        asyncio.run(admin.update_config(None, "tiny", config_path=str(paused)))  # type: ignore[arg-type]
