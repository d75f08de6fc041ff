"""The W&B sink, offline only (nothing leaves the machine): a real run's transaction log holds
what the events said, the mode follows the credentials, and W&B failures never raise.

W&B 0.31 writes an offline run as ``<WANDB_DIR>/wandb/offline-run-<time>-<id>/`` with
``run-<id>.wandb`` (its transaction log: a ``:W&B`` header, then LevelDB-log records, each a
``wandb_internal_pb2.Record``), ``files/`` (only ``requirements.txt``: no ``wandb-summary.json``
offline) and ``logs/``; the test reads the history and summary back from the transaction log.
"""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path
from typing import Any

import psutil
import pytest
import wandb
from wandb.proto import wandb_internal_pb2 as pb

from psyche.events import (
    AnyEvent,
    ApplyEvent,
    CheckpointEvent,
    EvalEvent,
    EventLog,
    FinishedEvent,
    OptimStatsEvent,
    RejectionsEvent,
    TrainEvent,
)
from psyche.metrics import WandbOptions, WandbSink, choose_mode, wandb_row


def _train(step: int, loss: float) -> TrainEvent:
    return TrainEvent(
        step=step, batch=(0, 3), loss=loss, seconds=0.5, compute_s=0.25, payload_bytes=3600,
        lr=4e-4, tokens=512,
    )  # fmt: skip


def _eval(step: int, acc: float) -> EvalEvent:
    return EvalEvent(
        step=step, task="synth", index=0, accuracy=acc, accuracy_norm=acc / 2, docs=40,
        complete=True,
    )  # fmt: skip


EVENTS: list[AnyEvent] = [
    ApplyEvent(step=1, height=0, applied_step=None, batches=0, model_hash="h"),
    _train(1, 5.5),
    ApplyEvent(step=2, height=1, applied_step=None, batches=0, model_hash="h"),
    _train(2, 4.25),
    OptimStatsEvent(step=2, stats={"weight_norm": 12.5, "grad_norm": 0.75}),
    RejectionsEvent(pid=1, since=0.0, counts={"stale_result": 2}),
    ApplyEvent(step=3, height=2, applied_step=1, batches=2, model_hash="h"),
    _eval(3, 0.8),
    FinishedEvent(step=3),
    _eval(2, 0.6),  # late: measured step 2, logged at step 3
    CheckpointEvent(step=3, path="/tmp/ck"),
    _train(3, 3.75),
]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """W&B offline, everything it writes under tmp_path, and no credentials to be found."""
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WANDB__DISABLE_STATS", "true")  # no system-metrics process
    return tmp_path


def _records(path: Path) -> list[Any]:
    """The records of a ``.wandb`` transaction log: a 7-byte header, then 32 KiB blocks of
    chunks (crc32 u32, length u16, type u8: 1 whole, 2 first, 3 middle, 4 last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, chunks, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (length == 0 and kind == 0):  # the block's zero padding
            pos += left
            continue
        chunks += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()  # type: ignore[attr-defined]  # generated, no stubs
            record.ParseFromString(chunks)
            out.append(record)
            chunks = b""
    return out


def _items(items: Any) -> dict[str, Any]:
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def _wandb_children() -> list[str]:
    return [p.name() for p in psutil.Process().children(recursive=True) if "wandb" in p.name()]


def test_an_offline_run_holds_what_the_events_said(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    with caplog.at_level(logging.INFO, logger="psyche.metrics"):
        sink = WandbSink(
            WandbOptions("psyche-test", group="run-1"), client="ab" * 16, config={"lr": 4e-4}
        )
        assert sink.active and sink.mode == "offline"
        assert _wandb_children()  # W&B's service process runs the run
        with EventLog(None, "ab" * 16, sinks=[sink]) as log:
            for e in EVENTS:
                log.write(e)
    assert not sink.active and not _wandb_children()  # finished, and the service is gone

    (run_dir,) = (isolated / "wandb").glob("offline-run-*")
    assert sink.sync_dir == str(run_dir)
    (log_file,) = run_dir.glob("run-*.wandb")
    assert any(f"wandb sync {run_dir}" in r.getMessage() for r in caplog.records)
    records = _records(log_file)

    (run,) = [r.run for r in records if r.HasField("run")]
    config = _items(run.config.update)
    assert (run.project, run.run_group, run.display_name) == (
        "psyche-test",
        "run-1",
        "client-abababab",
    )
    assert config["client"] == "ab" * 16 and config["lr"] == 4e-4

    rows = [_items(r.history.item) for r in records if r.HasField("history")]
    user = [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]
    assert [row["_step"] for row in rows] == [1, 2, 3]
    assert user[0] == {
        "apply/batches": 0, "train/loss": 5.5, "train/lr": 4e-4, "train/step_s": 0.5,
        "train/compute_s": 0.25, "train/payload_bytes": 3600, "train/tokens": 512,
        "train/tokens_per_s": 2048.0,
    }  # fmt: skip
    assert user[1]["train/loss"] == 4.25 and user[1]["optim/weight_norm"] == 12.5
    assert user[1]["optim/grad_norm"] == 0.75 and user[1]["p2p/rejections/stale_result"] == 2
    # Step 3's row merges its records; the late eval's value is the last one of the step.
    assert user[2]["apply/batches"] == 2 and user[2]["checkpoint/step"] == 3
    assert user[2]["eval/synth/acc"] == 0.6 and user[2]["eval/step"] == 2
    assert user[2]["train/loss"] == 3.75

    summary: dict[str, Any] = {}
    for r in records:
        if r.HasField("summary"):
            summary |= _items(r.summary.update)
    assert summary["train/loss"] == 3.75 and summary["eval/synth/acc"] == 0.6
    assert summary["eval/synth/acc_norm"] == 0.3 and summary["_step"] == 3


class FakeRun:
    def __init__(self, fail: bool = False) -> None:
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self.finished = 0
        self.fail = fail
        self.name, self.url = "fake", "https://example.invalid/run"
        self.settings = type("S", (), {"sync_dir": "/tmp/wandb/offline-run-x"})()

    def log(self, row: dict[str, Any], step: int) -> None:
        if self.fail:
            raise ConnectionError("service gone")
        self.rows.append((step, row))

    def finish(self) -> None:
        self.finished += 1


@pytest.fixture
def fake(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """wandb.init replaced: records its arguments and returns a FakeRun."""
    calls: dict[str, Any] = {"run": FakeRun()}

    def init(**kwargs: Any) -> FakeRun:
        calls["init"] = kwargs
        return calls["run"]

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr(wandb, "teardown", lambda: calls.setdefault("teardown", True))
    return calls


def test_no_credentials_means_offline(
    fake: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="psyche.metrics"):
        sink = WandbSink(WandbOptions("p", run="mine"), client="cd" * 16, config={})
    assert sink.mode == fake["init"]["mode"] == "offline"
    assert fake["init"]["name"] == "mine" and fake["init"]["project"] == "p"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "psyche.metrics"]
    assert "no WANDB_API_KEY" in line and "wandb sync /tmp/wandb/offline-run-x" in line
    sink.close()
    assert fake["run"].finished == 1 and fake["teardown"]


def test_the_mode_follows_the_environment(tmp_path: Path) -> None:
    absent = {"NETRC": str(tmp_path / "absent")}
    assert choose_mode(absent)[0] == "offline"
    assert choose_mode({**absent, "WANDB_API_KEY": "k" * 40})[0] == "online"
    assert choose_mode({**absent, "WANDB_API_KEY": "k" * 40, "WANDB_MODE": "offline"}) == (
        "offline",
        "WANDB_MODE is set",
    )
    assert choose_mode({**absent, "WANDB_MODE": "disabled"})[0] == "disabled"
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    assert choose_mode({"NETRC": str(netrc)})[0] == "online"
    # A login for another server does not count.
    assert (
        choose_mode({"NETRC": str(netrc), "WANDB_BASE_URL": "https://wb.example"})[0] == "offline"
    )


def test_steps_never_go_back(fake: dict[str, Any]) -> None:
    sink = WandbSink(WandbOptions("p"), client="ab", config={})
    for e in (_train(5, 2.0), _eval(3, 0.5), RejectionsEvent(pid=1, since=0, counts={"x": 1})):
        sink.on_event(e)
    sink.on_event(_train(6, 1.5))
    rows = fake["run"].rows
    assert [step for step, _ in rows] == [5, 5, 5, 6]
    assert rows[1][1]["eval/step"] == 3 and rows[2][1] == {"p2p/rejections/x": 1}


def test_a_failing_init_turns_the_sink_off_with_a_warning(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def init(**kwargs: Any) -> None:
        raise wandb.errors.CommError("no network")

    monkeypatch.setattr(wandb, "init", init)
    with caplog.at_level(logging.WARNING):
        sink = WandbSink(WandbOptions("p"), client="ab", config={})
        with EventLog(None, "ab", sinks=[sink]) as log:
            log.write(_train(1, 2.0))
    assert not sink.active
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.name == "psyche.metrics" and "no network" in warning.getMessage()


def test_a_failing_log_turns_the_sink_off_once(
    fake: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    fake["run"].fail = True
    sink = WandbSink(WandbOptions("p"), client="ab", config={})
    with caplog.at_level(logging.WARNING):
        sink.on_event(_train(1, 2.0))
        sink.on_event(_train(2, 2.0))
    assert not sink.active
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "service gone" in warning.getMessage()
    sink.close()
    assert fake["run"].finished == 1  # the run is still finished at close


def test_kinds_not_charted() -> None:
    assert wandb_row(FinishedEvent(step=1)) is None


def test_wandb_mode_disabled_starts_nothing(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sink = WandbSink(WandbOptions("p"), client="ab", config={})
    sink.on_event(_train(1, 2.0))
    sink.close()
    assert not sink.active and "init" not in fake and fake["run"].rows == []
