"""The status line: what a person watching a client's log reads per train step and eval pass."""

from __future__ import annotations

import logging

import pytest

from psyche.events import EvalEvent, EventLog, FinishedEvent, TrainEvent
from psyche.metrics import StatusLine, format_train
from psyche.metrics.status import format_bytes, format_count

TRAIN = TrainEvent(
    step=12,
    batch=(0, 7),
    loss=5.4312,
    seconds=0.8412,
    compute_s=0.5,
    payload_bytes=3600,
    lr=4e-4,
    tokens=600,
)


def _eval(task: str, acc: float, docs: int, complete: bool = True) -> EvalEvent:
    return EvalEvent(
        step=10, task=task, index=0, accuracy=acc, accuracy_norm=acc + 0.025, docs=docs,
        complete=complete,
    )  # fmt: skip


def test_units_are_short_and_readable() -> None:
    assert [format_count(x) for x in (0, 950, 1234, 56_700, 3.4e6, 5.6e9)] == [
        "0", "950", "1.2k", "56.7k", "3.4M", "5.6G",
    ]  # fmt: skip
    assert [format_bytes(n) for n in (0, 512, 3600, 1_234_567, 2_000_000_000)] == [
        "0 B", "512 B", "3.6 kB", "1.2 MB", "2.0 GB",
    ]  # fmt: skip


def test_train_lines_repeat_the_latest_evals(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.status")
    sink = StatusLine(logger)
    log = EventLog(None, "me", sinks=[sink])
    with caplog.at_level(logging.INFO, logger="test.status"):
        log.write(TRAIN)
        log.write(_eval("synth", 0.8, 40))
        log.write(FinishedEvent(step=12))  # not a status
        log.write(TRAIN)
        log.write(_eval("arc", 0.3125, 7, complete=False))
        log.write(_eval("synth", 0.85, 40))  # a later pass replaces the task's score
        log.write(TRAIN)
        log.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "test.status"]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "test.status")
    head = "step 12 · loss 5.431 · lr 4.0e-04 · 1.2k tok/s · 0.84 s · payload 3.6 kB"
    assert lines == [
        head,
        "eval step 10 · synth · acc 0.800 · acc_norm 0.825 · 40 docs",
        f"{head} · evals synth 0.80 (40 docs)",
        "eval step 10 · arc · acc 0.312 · acc_norm 0.338 · 7 docs · cut short",
        "eval step 10 · synth · acc 0.850 · acc_norm 0.875 · 40 docs",
        f"{head} · evals synth 0.85 (40 docs), arc 0.31 (7 docs, partial)",
    ]


def test_a_train_record_from_an_old_log_leaves_out_what_it_lacks() -> None:
    old = TrainEvent(step=3, batch=(0, 1), loss=2.0, seconds=12.5, compute_s=0.0, payload_bytes=80)
    assert format_train(old) == "step 3 · loss 2.000 · 12.50 s · payload 80 B"


def test_the_default_logger() -> None:
    assert StatusLine().logger.name == "psyche.status"
