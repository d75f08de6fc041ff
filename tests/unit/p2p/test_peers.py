"""Peer ordering for downloads: measured-fast first, then unmeasured, then failed.

See docs/protocol.md, "P2P model sharing".
"""

from __future__ import annotations

import pytest

from psyche.p2p.host.peers import (
    EWMA_WEIGHT,
    PINGS_PER_INTERVAL,
    RELAYED_EVERY,
    HostCounters,
    PeerTable,
    PingRotation,
    peer_stats,
)


def test_order_without_measurements_keeps_the_callers_order_and_drops_duplicates() -> None:
    assert PeerTable().order(["c", "a", "b", "a"]) == ["c", "a", "b"]
    assert PeerTable().order([]) == []


def test_measured_bandwidth_then_unmeasured_then_failed() -> None:
    t = PeerTable()
    t.record_transfer("slow", 1_000_000, 1.0)
    t.record_transfer("fast", 1_000_000, 0.01)
    t.record_failure("bad")
    assert t.order(["bad", "new", "slow", "fast"]) == ["fast", "slow", "new", "bad"]


def test_latency_breaks_ties_within_a_class() -> None:
    t = PeerTable()
    t.record_latency("far", 0.2)
    t.record_latency("near", 0.001)
    assert t.order(["far", "unknown", "near"]) == ["near", "far", "unknown"]
    t.record_failure("far")
    t.record_failure("near")
    assert t.order(["far", "near"]) == ["near", "far"]


def test_success_after_failure_restores_a_peer() -> None:
    t = PeerTable()
    t.record_failure("p")
    assert t.get("p").bandwidth_bps == 0.0 and t.get("p").failures == 1
    t.record_transfer("p", 2_000_000, 1.0)
    assert t.get("p").bandwidth_bps == 2_000_000
    assert t.order(["q", "p"]) == ["p", "q"]


def test_averages_are_exponentially_weighted() -> None:
    t = PeerTable()
    t.record_latency("p", 0.1)
    t.record_latency("p", 0.2)
    assert t.get("p").latency_s == pytest.approx((1 - EWMA_WEIGHT) * 0.1 + EWMA_WEIGHT * 0.2)
    t.record_transfer("p", 100, 0.0)  # an instant transfer does not divide by zero
    assert t.get("p").bandwidth_bps == pytest.approx(100 / 1e-3)


def test_retain_forgets_peers_that_left_and_report_lists_connected_ones() -> None:
    t = PeerTable()
    t.record_latency("stay", 0.01)
    t.record_latency("gone", 0.01)
    t.retain(["stay"])
    assert set(t.snapshot()) == {"stay"}
    report = peer_stats(t, ["stay", "other"], ["stay"], HostCounters(published=2))
    assert [(p.peer_id, p.connected) for p in report.peers] == [("stay", True), ("other", True)]
    assert report.counters.published == 2 and report.gossip_peers == ["stay"]


def test_pings_stay_bounded_per_interval_and_reach_every_peer() -> None:
    """A host's pings per interval do not grow with the run (the protocol's 256 clients), and
    each peer is pinged once every ⌈n / 8⌉ intervals at 8 per interval, never-pinged peers
    first."""
    rotation = PingRotation(8)
    peers = [f"peer{i:03d}" for i in range(255)]
    rounds = -(-len(peers) // 8)
    seen: list[str] = []
    for _ in range(rounds):
        due = rotation.due(peers)
        assert len(due) == 8
        seen += due
    # Everyone within 32 intervals; the last one's spare ping went to the oldest, peer000.
    assert sorted(seen) == sorted([*peers, "peer000"])
    # A peer that connects late is pinged at the next interval, before those pinged already,
    # and with it the seven pinged longest ago (peer001-peer007, from the first interval).
    assert rotation.due([*peers, "late"]) == ["late", *peers[1:8]]
    # Then the oldest pings left: peer008-peer015 (the second interval); the peers no longer
    # passed are forgotten.
    assert rotation.due(peers[:20]) == peers[8:16]
    assert set(rotation._last) <= set(peers[:20])


def test_relayed_peers_are_pinged_often_enough_to_keep_their_circuits() -> None:
    """A relay resets a circuit idle for 20 s, so a peer reached only through one is pinged at
    least every RELAYED_EVERY intervals (12 s) whatever the run's size; the others rotate at
    PINGS_PER_INTERVAL per interval."""
    rotation = PingRotation()
    peers = [f"peer{i:03d}" for i in range(64)]
    relayed = {"peer010", "peer050"}
    last: dict[str, int] = {}
    gaps: dict[str, list[int]] = {p: [] for p in peers}
    for interval in range(1, 200):
        due = rotation.due(peers, relayed)
        assert len([p for p in due if p not in relayed]) <= PINGS_PER_INTERVAL
        for p in due:
            if p in last:
                gaps[p].append(interval - last[p])
            last[p] = interval
    assert all(max(gaps[p]) <= RELAYED_EVERY for p in relayed)
    assert all(
        gaps[p] and max(gaps[p]) <= -(-62 // PINGS_PER_INTERVAL) + 1
        for p in peers
        if p not in relayed
    )


def test_few_peers_are_all_pinged_every_interval() -> None:
    rotation = PingRotation(3)
    for _ in range(3):
        assert rotation.due(["b", "a", "c"]) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        PingRotation(0)
