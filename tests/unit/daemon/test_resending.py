"""The outbox's schedule: what goes out again, when, and until when."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from psyche.daemon import gossip
from psyche.daemon.resending import DIRECT_FROM, RESEND_AFTER_S, Outbox, Resend
from psyche.p2p.messages import Finished, sign_announcement
from psyche.p2p.peer_id import peer_id_for

from .test_early_results import A, _result, _router


def _sends(box: Outbox, times: list[float], *, height: int, training: bool = True) -> list[float]:
    return [t for t in times if box.due(now=t, height=height, training=training)]


def _data(resends: list[Resend]) -> list[bytes]:
    assert all(r.to is None for r in resends), "without askers every resend is gossip"
    return [r.data for r in resends]


def test_a_result_goes_out_again_at_each_resend_time_and_then_never() -> None:
    box = Outbox()
    box.sent_result(b"r", height=5, now=100.0)
    ticks = [100.0 + 0.5 * i for i in range(1, 200)]
    assert _sends(box, ticks, height=5) == [100.0 + t for t in RESEND_AFTER_S]
    assert box.resent == len(RESEND_AFTER_S) and len(box) == 0


def test_a_result_is_resent_through_the_round_that_witnesses_it_and_not_after() -> None:
    box = Outbox()
    box.sent_result(b"r", height=5, now=0.0)
    # witnessed in 6
    assert _data(box.due(now=RESEND_AFTER_S[0], height=6, training=False)) == [b"r"]
    assert box.due(now=RESEND_AFTER_S[1], height=7, training=True) == []  # applied in 7
    assert len(box) == 0


def test_finished_is_resent_only_while_its_round_trains() -> None:
    box = Outbox()
    box.sent_finished(b"f", height=5, now=0.0)
    assert _data(box.due(now=RESEND_AFTER_S[0], height=5, training=True)) == [b"f"]
    assert box.due(now=RESEND_AFTER_S[1], height=5, training=False) == []
    assert len(box) == 0


def test_a_long_pause_sends_one_copy_and_skips_the_missed_times() -> None:
    box = Outbox()
    box.sent_result(b"r", height=1, now=0.0)
    assert _data(box.due(now=RESEND_AFTER_S[1] + 0.1, height=1, training=True)) == [b"r"]
    assert box.due(now=RESEND_AFTER_S[1] + 0.2, height=1, training=True) == []
    assert _data(box.due(now=RESEND_AFTER_S[2], height=1, training=True)) == [b"r"]
    assert box.resent == 2 and len(box) == 0


def test_nothing_is_due_before_its_time() -> None:
    box = Outbox()
    box.sent_result(b"a", height=1, now=0.0)
    box.sent_finished(b"b", height=1, now=1.0)
    assert box.due(now=RESEND_AFTER_S[0] - 0.01, height=1, training=True) == []
    assert _data(box.due(now=RESEND_AFTER_S[0] + 1.0, height=1, training=True)) == [b"a", b"b"]


def test_a_result_every_member_asked_for_is_not_sent_again() -> None:
    box = Outbox()
    blob = bytes(range(32))
    box.sent_result(b"r", height=5, now=0.0, blob_hash=blob)
    box.sent_finished(b"f", height=5, now=0.0)
    box.sent_result(b"old", height=5, now=0.0)  # no payload named: resent as before
    asked: list[bytes] = []
    missing = {blob: frozenset({"b", "c"})}

    def not_asked(blob_hash: bytes) -> frozenset[str]:
        asked.append(blob_hash)
        return missing[blob_hash]

    def due(now: float) -> list[Resend]:
        return box.due(now=now, height=5, training=True, not_asked=not_asked)

    assert due(1.0) == [] and asked == []  # asked only when a resend is due
    assert due(RESEND_AFTER_S[0]) == [Resend(b"r", missing[blob]), Resend(b"f"), Resend(b"old")]
    assert asked == [blob]
    missing[blob] = frozenset()  # every member has now asked for its payload
    assert _data(due(RESEND_AFTER_S[1])) == [b"f", b"old"]
    assert box.settled == 1 and box.resent == 5 and len(box) == 2
    assert _data(due(RESEND_AFTER_S[2])) == [b"f", b"old"] and len(box) == 0
    assert box.told == 2


def test_resends_of_a_result_go_straight_to_the_members_that_have_not_asked() -> None:
    # Gossip can leave a host out of every mesh for a whole round (32 real hosts on 2 cores);
    # the trainer knows who has not asked for its payload, so it tells them directly.
    assert DIRECT_FROM == 0
    box = Outbox()
    blob = bytes(32)
    box.sent_result(b"r", height=5, now=0.0, blob_hash=blob)
    box.sent_finished(b"f", height=5, now=0.0)  # names no payload: through gossip
    missing = frozenset({"b", "c", "d"})

    def due(now: float) -> list[Resend]:
        return box.due(now=now, height=5, training=True, not_asked=lambda _: missing)

    assert due(RESEND_AFTER_S[0]) == [Resend(b"r", missing), Resend(b"f")]
    missing = frozenset({"d"})
    assert due(RESEND_AFTER_S[1]) == [Resend(b"r", frozenset({"d"})), Resend(b"f")]
    assert due(RESEND_AFTER_S[2]) == [Resend(b"r", frozenset({"d"})), Resend(b"f")]
    assert box.told == 5 and box.resent == 6 and len(box) == 0


def test_without_askers_every_resend_goes_through_gossip() -> None:
    box = Outbox()
    box.sent_result(b"r", height=5, now=0.0, blob_hash=bytes(32))
    sent = [box.due(now=t, height=5, training=True) for t in RESEND_AFTER_S]
    assert sent == [[Resend(b"r")]] * len(RESEND_AFTER_S) and box.told == 0


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
