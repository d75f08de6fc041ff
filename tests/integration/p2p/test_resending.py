"""Gossip reaches a late peer only within gossipsub's window; resends carry a result past it.

Real node processes. A peer that connects to the mesh several seconds after a message went out
never receives it (gossipsub advertises only its last 3 heartbeats to new peers), which is why
the daemon sends its round announcements again (``psyche.daemon.resending``): the resent one
reaches the late peer, the one sent once does not.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from .harness import start_nodes

pytestmark = pytest.mark.slow

LATE_S = 6.0
"""How long after the announcements the third peer connects: past gossipsub's 3 s window and
the first resend (4 s), before the second (12 s)."""


def test_a_peer_that_connects_late_gets_the_resent_result_and_not_the_one_sent_once(
    reap_children: list[subprocess.Popen[bytes]],
) -> None:
    nodes = start_nodes("ABC", "resend-run", reap_children)
    a, b, c = members = list(nodes.values())
    for node in members:
        node.call("allow", peers=[n.peer_id for n in members if n is not node])
    b.call("connect", addrs=a.addrs)
    a.call("wait_peers", n=1, timeout=20)
    a.call("announce", step=11)
    a.call("announce", step=12, resend=True)
    b.wait_event(lambda e: e.get("step") == 12, timeout=10)
    b.wait_event(lambda e: e.get("step") == 11, timeout=10)
    time.sleep(LATE_S)
    c.call("connect", addrs=a.addrs + b.addrs)
    c.call("wait_peers", n=2, timeout=20)
    c.wait_event(lambda e: e.get("step") == 12, timeout=30)
    time.sleep(2.0)  # anything of step 11 still under way would be here by now
    assert 11 not in {e.get("step") for e in c.announcements()}
    # B, connected all along, saw the result once and each resend (receivers open a repeat once
    # and take it once; tests/unit/daemon/test_resending.py).
    assert sum(e.get("step") == 12 for e in b.announcements()) >= 2
    # A producer hears from its host which peers asked for its payload (so it stops resending
    # the result once every member has: tests/unit/daemon/test_resending.py); a blob served
    # otherwise is not tracked.
    reported = a.call("serve_reported", seed=5, size=5000)["hash"]
    plain = a.call("serve", seed=6, size=5000)["hash"]
    for node in (b, c):
        for blob in (reported, plain):
            assert node.call("fetch", hash=blob, peers=[a.peer_id], max_size=5000)["ok"]
    deadline = time.monotonic() + 10.0
    while a.call("askers", hash=reported)["peers"] != sorted([b.peer_id, c.peer_id]):
        assert time.monotonic() < deadline, a.call("askers", hash=reported)
        time.sleep(0.2)
    assert a.call("askers", hash=plain)["peers"] == []
    for node in members:
        node.stop()


def test_a_result_told_directly_reaches_the_member_named_and_no_outsider(
    reap_children: list[subprocess.Popen[bytes]],
) -> None:
    """Later resends go straight to the members that have not asked (``/psyche/tell/1``): the
    receiver takes the message as gossip from the stream's peer, members only."""
    nodes = start_nodes("ABC", "tell-run", reap_children)
    a, b, c = nodes.values()
    a.call("allow", peers=[b.peer_id, c.peer_id])
    b.call("allow", peers=[a.peer_id, c.peer_id])
    c.call("allow", peers=[a.peer_id])  # B is not a member as far as C knows
    b.call("connect", addrs=a.addrs)
    c.call("connect", addrs=a.addrs + b.addrs)
    c.call("wait_peers", n=2, timeout=20)
    a.call("announce", step=21, tell=[c.peer_id])
    b.call("announce", step=22, tell=[c.peer_id])
    got = c.wait_event(lambda e: e.get("step") == 21, timeout=15)
    assert got["from"] == a.peer_id and got["kind"] == "TrainingResult"
    deadline = time.monotonic() + 10.0
    while (counters := c.call("info")["counters"])["rejections"].get("non_member_gossip") != 1:
        assert time.monotonic() < deadline, counters
        time.sleep(0.2)
    assert 22 not in {e.get("step") for e in c.announcements()}
    assert counters["told_received"] == 1
    assert 21 not in {e.get("step") for e in b.announcements()}  # told to C alone
    deadline = time.monotonic() + 5.0
    while a.call("info")["counters"]["told"] != 1:
        assert time.monotonic() < deadline, a.call("info")["counters"]
        time.sleep(0.2)
    for node in nodes.values():
        node.stop()
