"""Refused peer input is counted by kind and logged once per peer; a peer that served wrong
bytes for a blob is warned about at once and never asked for that blob again (issue 12,
finding 8). The real-socket version is tests/integration/p2p/test_rejections.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from psyche.p2p.control import FetchDone, FetchErrorKind
from psyche.p2p.host.blobs import ByteStream, Status, encode_header
from psyche.p2p.host.fetch import FetchRequest, fetch_blob
from psyche.p2p.host.peers import PeerTable
from psyche.p2p.rejections import Rejection, Rejections, merge_counts

from .test_blobs import BLOB, H, Handler, Stream, scripted, server_for

LOG = logging.getLogger("test.rejections")


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOG.name]


def test_a_burst_costs_one_warning_per_peer_and_kind_and_every_message_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    r = Rejections(LOG)
    for _ in range(100):
        r.record(Rejection.stale_result, "peer-a", "step 3")
    for _ in range(5):
        r.record(Rejection.stale_result, "peer-b")
        r.record(Rejection.oversized_gossip, "peer-a", "5000 bytes")
    assert r.counts() == {"oversized_gossip": 5, "stale_result": 105}
    lines = _lines(caplog)
    assert len(lines) == 3
    assert "rejected stale_result from peer peer-a" in lines[0] and "(step 3)" in lines[0]
    assert "peer-b" in lines[1] and "oversized_gossip" in lines[2]


def test_warnings_stay_bounded_when_offenders_use_many_peer_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Peer ids are free to make: a thousand of them must not buy a thousand log lines.
    caplog.set_level(logging.WARNING, logger=LOG.name)
    r = Rejections(LOG, max_warned_peers=3)
    for i in range(1000):
        r.record(Rejection.non_member_gossip, f"sybil-{i}")
    assert r.count(Rejection.non_member_gossip) == 1000
    lines = _lines(caplog)
    assert len(lines) == 4 and "further offenders are only counted" in lines[-1]


def test_merge_counts_adds_kinds_and_drops_zeros() -> None:
    assert merge_counts([{"a": 1, "b": 0}, {"a": 2, "c": 3}, {}]) == {"a": 3, "c": 3}


def _fetch(
    tmp_path: Path,
    handlers: dict[str, Handler],
    peers: list[str],
    rejections: Rejections,
    liars: set[str],
    timeout: float = 5.0,
) -> tuple[FetchDone, list[str]]:
    opened: list[str] = []

    async def main() -> FetchDone:
        async with trio.open_nursery() as nursery:

            async def open_stream(peer: str) -> ByteStream:
                opened.append(peer)
                ours, theirs = trio.testing.memory_stream_pair()
                nursery.start_soon(handlers[peer], Stream(theirs))
                return Stream(ours)

            done = await fetch_blob(
                FetchRequest(1, H, len(BLOB), peers, timeout, 2.0),
                blob_dir=tmp_path,
                table=PeerTable(),
                is_allowed=lambda p: True,
                open_stream=open_stream,
                rejections=rejections,
                liars=liars,
            )
            nursery.cancel_scope.cancel()
            return done

    return trio.run(main), opened


def test_a_peer_serving_wrong_bytes_is_warned_about_once_and_not_asked_for_that_blob_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    _, forger = server_for(tmp_path, bytes(len(BLOB)))
    _, honest = server_for(tmp_path, BLOB)
    handlers = {"forger": forger, "honest": honest}
    rejections, liars = Rejections(LOG), set[str]()

    done, opened = _fetch(tmp_path, handlers, ["forger", "honest"], rejections, liars)
    assert done.from_peer == "honest" and opened == ["forger", "honest"]
    assert rejections.counts() == {"blob_hash_mismatch": 1} and liars == {"forger"}
    (line,) = _lines(caplog)
    assert "rejected blob_hash_mismatch from peer forger" in line and H.hex()[:16] in line

    # The next fetch of the same blob skips the forger from the start (no transfer, no count).
    (tmp_path / f"{H.hex()}.blob").unlink()
    done, opened = _fetch(tmp_path, handlers, ["forger", "honest"], rejections, liars)
    assert done.from_peer == "honest" and opened == ["honest"]
    assert ("forger", "served wrong bytes for this blob before") in [
        (f.peer, f.reason) for f in done.failures
    ]
    # With nobody else to ask, the fetch ends at once instead of running to its deadline.
    done, opened = _fetch(tmp_path, handlers, ["forger"], rejections, liars, timeout=60.0)
    assert done.kind is FetchErrorKind.not_found and done.seconds < 1.0 and opened == []
    assert rejections.count(Rejection.blob_hash_mismatch) == 1 and len(_lines(caplog)) == 1


def test_a_peer_announcing_more_bytes_than_asked_is_counted(tmp_path: Path) -> None:
    _, honest = server_for(tmp_path, BLOB)
    liar = scripted(encode_header(Status.OK, len(BLOB) + 1))
    rejections, liars = Rejections(LOG), set[str]()
    done, _ = _fetch(tmp_path, {"liar": liar, "b": honest}, ["liar", "b"], rejections, liars)
    assert done.from_peer == "b"
    assert rejections.counts() == {"blob_oversize": 1} and not liars
