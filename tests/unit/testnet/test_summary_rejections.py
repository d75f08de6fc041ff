"""The testnet summary's rejection counts: per client (summed over restarts) and in total, and
the printed form (issue 12, finding 8)."""

from __future__ import annotations

import json
from pathlib import Path

from psyche.cli.testnet import rejections_text
from psyche.events import RejectionsEvent, TrainEvent
from psyche.testnet.summary import ClientTally, build_summary

from .test_testnet_summary import _state, _write


def _rejections(t: float, pid: int, since: float, counts: dict[str, int]) -> RejectionsEvent:
    return RejectionsEvent(t=t, client="a", pid=pid, since=since, counts=counts)


def test_counts_are_per_client_summed_over_restarts_and_totalled(tmp_path: Path) -> None:
    server = _write(tmp_path / "server.jsonl", [_state(100, 0, 1, "RoundTrain", "Hub", ["a"])])
    a = _write(
        tmp_path / "a.jsonl",
        [
            # Counts are cumulative per process: only each process's last event counts...
            _rejections(101, 7, 99.0, {"stale_result": 1}),
            _rejections(102, 7, 99.0, {"stale_result": 4, "oversized_gossip": 2}),
            # ...and a restarted process (same label, new pid) starts again from zero.
            _rejections(110, 9, 109.0, {"stale_result": 1}),
        ],
    )
    train = TrainEvent(
        t=101,
        client="b",
        step=1,
        batch=(0, 3),
        loss=1.0,
        seconds=0.2,
        compute_s=0.1,
        payload_bytes=100,
    )
    b = _write(tmp_path / "b.jsonl", [train])
    tallies = {"client-a": ClientTally(joins=2), "client-b": ClientTally(joins=1)}
    summary = build_summary(server, {"client-a": a, "client-b": b}, tallies)
    out = json.loads(json.dumps(summary.to_json()))
    assert out["clients"]["client-a"]["rejections"] == {"oversized_gossip": 2, "stale_result": 5}
    assert out["clients"]["client-b"]["rejections"] == {}
    assert out["rejections"] == {"oversized_gossip": 2, "stale_result": 5}
    # Rebuilding the summary (the launcher does it while the run goes on) changes nothing.
    again = build_summary(server, {"client-a": a, "client-b": b}, tallies).to_json()
    assert again["rejections"] == out["rejections"] and tallies["client-a"].rejections == {}


def test_printed_form() -> None:
    assert rejections_text({}) == "none"
    assert rejections_text({"stale_result": 5, "oversized_gossip": 2}) == (
        "7 (oversized_gossip=2, stale_result=5)"
    )
