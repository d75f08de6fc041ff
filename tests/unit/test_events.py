"""The typed event log: every kind round-trips, a line no reader knows fails loudly, and the
incremental reader waits for a torn last line's newline."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import msgspec
import pytest

from psyche.events import (
    AnyEvent,
    ApplyEvent,
    CheckpointEvent,
    EventLog,
    EventLogError,
    EventTail,
    FinishedEvent,
    ModelLoadedEvent,
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
    RejectionsEvent(pid=42, since=1700000000.5, counts={"stale_result": 2}),
    FinishedEvent(step=9),
    CheckpointEvent(step=9, path="/tmp/ck/run/9"),
    UploadEvent(step=9, repo="org/model", revision="abc123"),
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
    }
    assert "nonce" not in lines[-2] and lines[-1]["nonce"] == 12


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
