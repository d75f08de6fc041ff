"""Gossip between real node processes: mesh delivery, allow-list, sender binding, size bound."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest

from .harness import NodeProc, start_nodes

pytestmark = pytest.mark.slow


def test_three_node_mesh_delivers_every_announcement_and_drops_non_allowed_senders(
    reap_children: list[subprocess.Popen[bytes]],
) -> None:
    nodes = start_nodes("ABC", "gossip-run", reap_children)
    a, b, c = members = list(nodes.values())
    for node in members:
        node.call("allow", peers=[n.peer_id for n in members if n is not node])
    # A line A–B–C: A's messages reach C only by being forwarded through B.
    b.call("connect", addrs=a.addrs)
    c.call("connect", addrs=b.addrs)
    a.call("wait_peers", n=1, timeout=20)
    b.call("wait_peers", n=2, timeout=20)
    c.call("wait_peers", n=1, timeout=20)

    sent = {}
    for i, node in enumerate(members):
        for k in range(5):
            step = 10 * (i + 1) + k
            sent[step] = node.call("announce", step=step)["sent_at"]
    b.call("announce", step=77, foreign=True)  # signed with a key that is not B's
    with pytest.raises(RuntimeError, match="AnnouncementError"):
        a.call("announce_raw", size=4097)

    for i, node in enumerate(members):
        expected = {s for s in sent if s // 10 != i + 1}

        def has_all(
            _: dict[str, Any], node: NodeProc = node, expected: set[int] = expected
        ) -> bool:
            return expected <= {x.get("step") for x in node.announcements()}

        node.wait_event(has_all, timeout=10)
    for node in members:
        ok = [e for e in node.announcements() if "step" in e]
        assert all(e["kind"] == "TrainingResult" for e in ok)
        assert len(ok) == len({e["step"] for e in ok}) == 10, "duplicate or missing deliveries"
        # Within a few seconds of publishing (a few ms on an idle machine).
        assert max(e["at"] - sent[e["step"]] for e in ok) < 5.0
    # B's libp2p identity is allowed, so the foreign-signed message is delivered, but it fails
    # the check that the announcement's signer is the peer that published it.
    for node in (a, c):
        node.wait_event(lambda e: "published by peer" in e.get("error", ""), timeout=5)

    # A drops C from its allow-list: C's gossip still reaches B (and passes through it), but A
    # neither delivers nor counts it as anything but a drop.
    a.call("allow", peers=[b.peer_id])
    c.call("announce", step=99)
    b.wait_event(lambda e: e.get("step") == 99, timeout=10)
    deadline = time.monotonic() + 5  # counters reach the parent with the next host report
    while a.call("info")["counters"]["dropped_not_allowed"] < 1:
        assert time.monotonic() < deadline, "C's message was not counted as dropped at A"
        time.sleep(0.3)
    assert 99 not in {e.get("step") for e in a.announcements()}
    for node in members:
        node.stop()
