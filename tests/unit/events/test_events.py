"""The typed event log: every kind round-trips, a line no reader knows fails loudly, the
incremental reader waits for a torn last line's newline, and sinks see every record without
being able to break the writer."""

from __future__ import annotations

import json
import logging
import typing
from pathlib import Path

import msgspec
import pytest

from psyche.events import (
    AnyEvent,
    ApplyEvent,
    CheckpointEvent,
    DownloadEvent,
    EvalEvent,
    EventLog,
    EventLogError,
    EventTail,
    FinishedEvent,
    ModelLoadedEvent,
    OptimStatsEvent,
    RejectionsEvent,
    StateEvent,
    TrainEvent,
    TransactionEvent,
    UploadEvent,
    read_events,
)

STATE = StateEvent(
    run_state="RoundTrain",
    epoch=1,
    step=7,
    height=3,
    witnesses=1,
    witness_target=2,
    clients={"ab": "Healthy", "cd": "Ejected"},
    checkpoint="Hub:runs/model",
    retries=[(0, 3)],
    lost=1,
)

ONE_OF_EACH: list[AnyEvent] = [
    ModelLoadedEvent(step=7, source="p2p", peers=["a", "b"], seconds=1.25, model_hash="h1"),
    ModelLoadedEvent(step=0, source="Hub", peers=[], seconds=None, model_hash="h0"),
    ApplyEvent(step=7, height=3, applied_step=5, batches=2, model_hash="h2"),
    ApplyEvent(step=1, height=0, applied_step=None, batches=0, model_hash="h3"),
    TrainEvent(step=7, batch=(4, 7), loss=2.5, seconds=0.75, compute_s=0.5, payload_bytes=1024),
    TrainEvent(
        step=8,
        batch=(8, 11),
        loss=2.25,
        seconds=0.5,
        compute_s=0.25,
        payload_bytes=99,
        lr=4e-4,
        tokens=512,
    ),
    EvalEvent(
        step=8, task="synth", index=0, accuracy=0.8, accuracy_norm=0.75, docs=40, complete=True
    ),
    OptimStatsEvent(step=8, stats={"weight_norm": 12.5, "nonfinite/weights": 0.0}),
    RejectionsEvent(pid=42, since=1700000000.5, counts={"stale_result": 2}),
    FinishedEvent(step=9),
    CheckpointEvent(step=9, path="/tmp/ck/run/9"),
    UploadEvent(step=9, repo="org/model", revision="abc123"),
    DownloadEvent(step=7, height=3, producer="p1", from_peer="p2", bytes=3572, seconds=0.12),
    TransactionEvent(label="witness", signature="5xyz"),
    STATE,
    msgspec.structs.replace(STATE, nonce=12, checkpoint=None),
]


def test_every_kind_is_in_the_list_above() -> None:
    assert {type(e) for e in ONE_OF_EACH} == set(typing.get_args(AnyEvent))


def test_every_kind_round_trips_with_t_and_client_stamped(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    log = EventLog(path, "me")
    for e in ONE_OF_EACH:
        log.write(e)
    back = read_events(path)
    assert [msgspec.structs.replace(e, t=0.0, client="") for e in back] == ONE_OF_EACH
    assert all(e.client == "me" and e.t > 1e9 for e in back)
    # The lines keep their shape: the kind under "event", "t" and "client", then the fields.
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[4] == {
        "event": "train",
        "t": back[4].t,
        "client": "me",
        "step": 7,
        "batch": [4, 7],
        "loss": 2.5,
        "seconds": 0.75,
        "compute_s": 0.5,
        "payload_bytes": 1024,
        "lr": None,
        "tokens": 0,
    }
    assert "nonce" not in lines[-2] and lines[-1]["nonce"] == 12


def test_a_train_line_written_before_lr_and_tokens_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    old = {
        "event": "train", "t": 5.5, "client": "ab", "step": 3, "batch": [0, 3], "loss": 4.0,
        "seconds": 1.0, "compute_s": 0.5, "payload_bytes": 10,
    }  # fmt: skip
    path.write_text(json.dumps(old) + "\n")
    (e,) = read_events(path)
    assert isinstance(e, TrainEvent)
    assert (e.step, e.loss, e.lr, e.tokens) == (3, 4.0, None, 0)


def test_a_log_written_before_the_records_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    old = {"t": 100.5, "event": "finished", "client": "ab", "step": 3}
    path.write_text(json.dumps(old) + "\n")
    assert read_events(path) == [FinishedEvent(t=100.5, client="ab", step=3)]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ({"t": 1, "event": "hello", "client": "a"}, "Invalid value 'hello'"),
        ({"t": 1, "client": "a", "step": 1}, "missing required field `event`"),
        ({"t": 1, "event": "finished", "client": "a"}, "missing required field `step`"),
        ({"t": 1, "event": "finished", "client": "a", "step": 1, "x": 2}, "unknown field `x`"),
        ({"t": 1, "event": "finished", "client": "a", "step": "1"}, "Expected `int`"),
    ],
)
def test_a_line_no_reader_knows_fails_loudly(tmp_path: Path, line: dict, why: str) -> None:
    path = tmp_path / "e.jsonl"
    good = json.dumps({"t": 1, "event": "finished", "client": "a", "step": 0})
    path.write_text(f"{good}\n{json.dumps(line)}\n{good}\n")
    with pytest.raises(EventLogError, match=why) as err:
        read_events(path)
    assert f"{path}:2:" in str(err.value)
    with pytest.raises(EventLogError, match=why):
        EventTail(path).poll()


def test_no_path_writes_nothing(tmp_path: Path) -> None:
    EventLog(None, "me").write(FinishedEvent(step=1))
    assert read_events(tmp_path / "absent.jsonl") == []


def test_a_torn_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    log = EventLog(path, "x")
    log.write(FinishedEvent(step=1))
    with path.open("a") as f:
        f.write('{"event": "finished", "t": 2, "cli')
    assert [e.step for e in read_events(path) if isinstance(e, FinishedEvent)] == [1]
    # A killed client's torn line, then its restart appending to it: only the cut is lost.
    log.write(FinishedEvent(step=3))
    log.write(FinishedEvent(step=4))
    assert [e.step for e in read_events(path) if isinstance(e, FinishedEvent)] == [1, 3, 4]
    assert [e.step for e in EventTail(path).poll() if isinstance(e, FinishedEvent)] == [1, 3, 4]


def test_tail_reads_only_appended_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    tail = EventTail(path)
    assert tail.poll() == []
    log = EventLog(path, "x")
    log.write(FinishedEvent(step=1))
    log.write(CheckpointEvent(step=1, path="p"))
    assert [type(e) for e in tail.poll()] == [FinishedEvent, CheckpointEvent]
    assert tail.poll() == []
    with path.open("a") as f:
        f.write('{"event": "finished", "t": 3, "client": "x"')
    assert tail.poll() == []
    with path.open("a") as f:
        f.write(', "step": 3}\n')
    assert tail.poll() == [FinishedEvent(t=3, client="x", step=3)]
    assert [type(e) for e in tail.events] == [FinishedEvent, CheckpointEvent, FinishedEvent]
    assert len(read_events(path)) == 3
    # A bad line after good ones names its line number in the whole file.
    with path.open("a") as f:
        f.write('{"event": "finished", "t": 4, "client": "x"}\n')
    with pytest.raises(EventLogError, match=r"e\.jsonl:4:"):
        tail.poll()


class Recorder:
    def __init__(self) -> None:
        self.events: list[AnyEvent] = []
        self.closed = 0

    def on_event(self, event: AnyEvent) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed += 1


class Broken:
    def __init__(self) -> None:
        self.calls = 0

    def on_event(self, event: AnyEvent) -> None:
        self.calls += 1
        raise RuntimeError("sink down")

    def close(self) -> None:
        raise OSError("cannot close")


def test_sinks_get_every_record_stamped_as_written(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    a, b = Recorder(), Recorder()
    log = EventLog(path, "me", sinks=[a, b])
    for e in ONE_OF_EACH:
        log.write(e)
    assert a.events == b.events == read_events(path)
    log.close()
    log.close()  # closing twice closes the sinks once
    assert a.closed == b.closed == 1
    log.write(FinishedEvent(step=10))  # after close: the file still gets it, the sinks do not
    assert len(read_events(path)) == len(ONE_OF_EACH) + 1 and len(a.events) == len(ONE_OF_EACH)


def test_sinks_get_records_without_a_file(tmp_path: Path) -> None:
    sink = Recorder()
    with EventLog(None, "me", sinks=[sink]) as log:
        log.write(FinishedEvent(step=1))
    assert [(type(e), e.client) for e in sink.events] == [(FinishedEvent, "me")]
    assert sink.events[0].t > 1e9 and sink.closed == 1
    assert list(tmp_path.iterdir()) == []


def test_a_raising_sink_breaks_neither_the_log_nor_other_sinks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "e.jsonl"
    broken, good = Broken(), Recorder()
    log = EventLog(path, "me", sinks=[broken, good])
    with caplog.at_level(logging.WARNING, logger="psyche.events"):
        for step in range(3):
            log.write(FinishedEvent(step=step))
        log.close()
    assert [e.step for e in read_events(path) if isinstance(e, FinishedEvent)] == [0, 1, 2]
    assert len(good.events) == 3 and good.closed == 1
    assert broken.calls == 3  # it keeps getting records: its trouble may pass
    warnings = [r for r in caplog.records if r.name == "psyche.events"]
    # The first failure with its traceback, then one total at close (3 writes + the close).
    assert len(warnings) == 2
    assert "Broken failed in on_event" in warnings[0].getMessage() and warnings[0].exc_info
    assert "failed 4 times" in warnings[1].getMessage()
