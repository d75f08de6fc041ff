"""The outbox's schedule: what goes out again, when, and until when."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from psyche.daemon import gossip
from psyche.daemon.resending import RESEND_AFTER_S, Outbox
from psyche.p2p.messages import Finished, sign_announcement
from psyche.p2p.peer_id import peer_id_for

from .test_early_results import A, _result, _router


def _sends(box: Outbox, times: list[float], *, height: int, training: bool = True) -> list[float]:
    return [t for t in times if box.due(now=t, height=height, training=training)]


def test_a_result_goes_out_again_at_each_resend_time_and_then_never() -> None:
    box = Outbox()
    box.sent_result(b"r", height=5, now=100.0)
    ticks = [100.0 + 0.5 * i for i in range(1, 200)]
    assert _sends(box, ticks, height=5) == [100.0 + t for t in RESEND_AFTER_S]
    assert box.resent == len(RESEND_AFTER_S) and len(box) == 0


def test_a_result_is_resent_through_the_round_that_witnesses_it_and_not_after() -> None:
    box = Outbox()
    box.sent_result(b"r", height=5, now=0.0)
    assert box.due(now=RESEND_AFTER_S[0], height=6, training=False) == [b"r"]  # witnessed in 6
    assert box.due(now=RESEND_AFTER_S[1], height=7, training=True) == []  # applied in 7
    assert len(box) == 0


def test_finished_is_resent_only_while_its_round_trains() -> None:
    box = Outbox()
    box.sent_finished(b"f", height=5, now=0.0)
    assert box.due(now=RESEND_AFTER_S[0], height=5, training=True) == [b"f"]
    assert box.due(now=RESEND_AFTER_S[1], height=5, training=False) == []
    assert len(box) == 0


def test_a_long_pause_sends_one_copy_and_skips_the_missed_times() -> None:
    box = Outbox()
    box.sent_result(b"r", height=1, now=0.0)
    assert box.due(now=RESEND_AFTER_S[1] + 0.1, height=1, training=True) == [b"r"]
    assert box.due(now=RESEND_AFTER_S[1] + 0.2, height=1, training=True) == []
    assert box.due(now=RESEND_AFTER_S[2], height=1, training=True) == [b"r"]
    assert box.resent == 2 and len(box) == 0


def test_nothing_is_due_before_its_time() -> None:
    box = Outbox()
    box.sent_result(b"a", height=1, now=0.0)
    box.sent_finished(b"b", height=1, now=1.0)
    assert box.due(now=RESEND_AFTER_S[0] - 0.01, height=1, training=True) == []
    assert box.due(now=RESEND_AFTER_S[0] + 1.0, height=1, training=True) == [b"a", b"b"]


def test_a_result_every_member_asked_for_is_not_sent_again() -> None:
    box = Outbox()
    blob = bytes(range(32))
    box.sent_result(b"r", height=5, now=0.0, blob_hash=blob)
    box.sent_finished(b"f", height=5, now=0.0)
    box.sent_result(b"old", height=5, now=0.0)  # no payload named: resent as before
    asked: list[bytes] = []
    heard: set[bytes] = set()

    def heard_by_all(blob_hash: bytes) -> bool:
        asked.append(blob_hash)
        return blob_hash in heard

    def due(now: float) -> list[bytes]:
        return box.due(now=now, height=5, training=True, heard_by_all=heard_by_all)

    assert due(1.0) == [] and asked == []  # asked only when a resend is due
    assert due(RESEND_AFTER_S[0]) == [b"r", b"f", b"old"] and asked == [blob]
    heard.add(blob)  # every member has now asked for its payload
    assert due(RESEND_AFTER_S[1]) == [b"f", b"old"]
    assert box.settled == 1 and box.resent == 5 and len(box) == 2
    assert due(RESEND_AFTER_S[2]) == [b"f", b"old"] and len(box) == 0


class _Gossip:
    """A node whose gossip is ``messages`` and whose fetches never finish."""

    def __init__(self, messages: list[tuple[str, bytes]]) -> None:
        self.messages = messages

    async def announcements(self) -> AsyncIterator[tuple[str, bytes]]:
        for m in self.messages:
            yield m

    async def fetch_detailed(self, *args: object, **kwargs: object) -> object:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_a_repeated_announcement_is_opened_once_and_taken_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[bytes] = []
    real_open = gossip.open_announcement

    def counting(data: bytes, *, from_peer: str) -> Any:
        opened.append(data)
        return real_open(data, from_peer=from_peer)

    monkeypatch.setattr(gossip, "open_announcement", counting)

    async def scenario() -> None:
        a_peer = peer_id_for(A.public_key())
        messages: list[tuple[str, bytes]] = []
        with _router(tmp_path, _Gossip(messages)) as (router, epoch, state, _coord):
            batch = state.batch_of(A.node_identity())
            assert batch is not None
            result = sign_announcement(A, _result(state.step, batch, A))
            done = sign_announcement(A, Finished(step=state.step, warmup=False))
            messages += [(a_peer, result), (a_peer, done)] * 4
            messages.append((a_peer, result[:-1] + bytes([result[-1] ^ 1])))  # a bad signature
            await router.run()
            assert opened == [result, done, messages[-1][1]]
            assert list(state.results) == [batch] and len(epoch.downloads) == 1
            assert A.node_identity() in state.finished
            assert router.parts.rejections.counts() == {"bad_announcement": 1}
            epoch.cancel_downloads()

    asyncio.run(scenario())
