"""Which manifest a joiner trusts, and which peer it asks next."""

from __future__ import annotations

import pytest

from psyche.checkpoint.p2p import PeerFetchError, PeerPool, choose_offer
from psyche.p2p.messages import ModelAvailable

A, B, C, D = (bytes([i]) * 32 for i in range(1, 5))
GOOD, BAD = b"\x11" * 32, b"\x22" * 32


def offer(h: bytes, step: int = 5, size: int = 100) -> ModelAvailable:
    return ModelAvailable(step=step, manifest_hash=h, manifest_size=size, nonce=0)


@pytest.mark.parametrize(
    ("offers", "trusted", "expect"),
    [
        ({A: offer(GOOD)}, {A, B}, (GOOD, [A])),
        ({A: offer(GOOD), B: offer(GOOD), C: offer(BAD)}, {A, B, C}, (GOOD, [A, B])),
        # an untrusted peer's offer does not count, whatever it says
        ({A: offer(GOOD), D: offer(BAD)}, {A, B}, (GOOD, [A])),
        ({A: offer(GOOD), B: offer(BAD, step=4)}, {A, B}, (GOOD, [A])),
    ],
)
def test_majority_of_trusted_offers_wins(offers: dict, trusted: set, expect: tuple) -> None:
    choice = choose_offer(offers, trusted, 5)
    assert (choice.manifest_hash, choice.peers) == expect


@pytest.mark.parametrize(
    ("offers", "message"),
    [
        ({}, "no previous-epoch peer"),
        ({D: offer(GOOD)}, "no previous-epoch peer"),
        ({A: offer(GOOD, step=3)}, "no previous-epoch peer"),
        ({A: offer(GOOD), B: offer(BAD)}, "disagree"),
        ({A: offer(GOOD, size=1 << 30)}, "exceeds"),
    ],
)
def test_no_agreement_is_an_error(offers: dict, message: str) -> None:
    with pytest.raises(PeerFetchError, match=message):
        choose_offer(offers, {A, B, C}, 5)


def test_pool_spreads_requests_and_drops_failing_peers() -> None:
    pool = PeerPool(["p1", "p2", "p3"], max_errors=2)
    picked = []
    for _ in range(3):
        p = pool.pick()
        assert p is not None
        pool.in_flight[p] += 1
        picked.append(p)
    assert sorted(picked) == ["p1", "p2", "p3"]
    assert pool.pick(avoid={"p1"}) != "p1"
    pool.failed("p2", "timeout")
    assert "p2" in pool.live()
    pool.failed("p2", "timeout")
    assert pool.live() == ["p1", "p3"]
    assert pool.pick(avoid={"p1", "p3"}) in ("p1", "p3")  # everyone tried: ask again anyway
    pool.failed("p1", "x")
    pool.failed("p1", "x")
    pool.failed("p3", "x")
    pool.failed("p3", "x")
    assert pool.pick() is None
