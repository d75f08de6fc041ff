"""``FaultLog``: one warning per kind and peer, exact counts per kind, bounded memory and lines."""

from __future__ import annotations

import logging

import pytest

from psyche.net.faults import FaultLog

log = logging.getLogger("test.faults")


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == log.name]


def test_first_fault_of_each_kind_and_peer_is_logged_and_every_fault_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    faults = FaultLog(log)
    for _ in range(50):
        faults.record("10.0.0.1", "malformed", "bad client message: nested too deeply")
    faults.record("10.0.0.1", "oversize", "frame of 9999999 bytes")
    faults.record("abcd", "idle_timeout", "no frame for 60 s")
    assert faults.counts == {"malformed": 50, "oversize": 1, "idle_timeout": 1}
    assert faults.of("10.0.0.1", "malformed") == 50 and faults.of("abcd", "idle_timeout") == 1
    further = "(further faults of this kind from this peer are only counted)"
    assert _lines(caplog) == [
        f"10.0.0.1: malformed: bad client message: nested too deeply {further}",
        f"10.0.0.1: oversize: frame of 9999999 bytes {further}",
        f"abcd: idle timeout: no frame for 60 s {further}",
    ]
    assert faults.summary() == "1 idle timeout, 50 malformed, 1 oversize"
    assert FaultLog(log).summary() == "none"


def test_peers_and_lines_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    faults = FaultLog(log, max_peers=3, lines_per_minute=5)
    for i in range(100):  # a host minting a key per connection
        faults.record(f"key{i}", "malformed", "garbage")
    assert faults.counts == {"malformed": 100}
    assert len(_lines(caplog)) == 5
    assert faults.of("key0", "malformed") == 0  # the oldest are forgotten
    assert faults.of("key99", "malformed") == 1


def test_a_hostile_detail_is_logged_safely(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    FaultLog(log).record("p", "malformed", "bad \ud800")
    (line,) = _lines(caplog)
    line.encode("utf-8")
    assert "bad \\ud800" in line
