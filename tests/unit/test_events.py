"""The event log and its incremental reader (a torn last line waits for its newline)."""

from __future__ import annotations

from pathlib import Path

from psyche.events import EventLog, EventTail, read_events


def test_tail_reads_only_appended_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    tail = EventTail(path)
    assert tail.poll() == []
    log = EventLog(path, "x")
    log.write("a", n=1)
    log.write("b", n=2)
    assert [e["event"] for e in tail.poll()] == ["a", "b"]
    with path.open("a") as f:
        f.write('{"event": "torn"')
    assert tail.poll() == []
    with path.open("a") as f:
        f.write(', "n": 3}\n')
    assert [e["event"] for e in tail.poll()] == ["torn"]
    assert [e["event"] for e in tail.events] == ["a", "b", "torn"]
    assert len(read_events(path)) == 3
