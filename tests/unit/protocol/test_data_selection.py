"""Batch ids and the per-round assignment of sample intervals to trainers."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psyche.protocol.commitment import sha256
from psyche.protocol.committee import CommitteeSelection
from psyche.protocol.data_selection import (
    BatchId,
    assign_data_for_state,
    get_batch_ids_for_round,
)
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.shuffle import deterministic_shuffle

U64_MAX = (1 << 64) - 1


def clients(n: int) -> list[NodeIdentity]:
    return [NodeIdentity.from_single_key(sha256(b"node %d" % i)) for i in range(n)]


def selection(total: int, seed: int, vp: int = 0, tb: int = 0) -> CommitteeSelection:
    return CommitteeSelection(
        tie_breaker_nodes=tb,
        witness_nodes=0,
        verification_percent=vp,
        total_nodes=total,
        seed=seed,
    )


def assign(n: int, seed: int, data_index: int, batch_size: int) -> dict[BatchId, NodeIdentity]:
    return assign_data_for_state(clients(n), selection(n, seed), data_index, batch_size, seed)


# --- BatchId -----------------------------------------------------------------------------


def test_batch_id_basics() -> None:
    b = BatchId(10, 13)
    assert b.size == 4
    assert BatchId(7, 7).size == 1
    assert [i for i in range(8, 16) if b.contains(i)] == [10, 11, 12, 13]
    assert str(b) == "[10, 13]"
    assert sorted([BatchId(5, 6), BatchId(0, 4), BatchId(7, 9)]) == [
        BatchId(0, 4),
        BatchId(5, 6),
        BatchId(7, 9),
    ]
    assert BatchId(0, 4) < BatchId(5, 5)
    assert len({BatchId(1, 2), BatchId(1, 2)}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.start = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("start", "end", "error"),
    [(5, 4, ValueError), (-1, 3, ValueError), (0, U64_MAX + 1, ValueError), (0.0, 1, TypeError)],
)
def test_batch_id_validation(start: int, end: int, error: type) -> None:
    with pytest.raises(error):
        BatchId(start, end)


# --- get_batch_ids_for_round -------------------------------------------------------------


@pytest.mark.parametrize(
    ("data_index", "batch_size", "n", "expected"),
    [
        (0, 10, 3, [(0, 3), (4, 6), (7, 9)]),
        (0, 9, 3, [(0, 2), (3, 5), (6, 8)]),
        (100, 2, 3, [(100, 100), (101, 101)]),
        (5, 0, 3, []),
        (0, 7, 0, []),
        (0, 1, 1, [(0, 0)]),
        (42, 5, 1, [(42, 46)]),
        (U64_MAX - 3, 4, 2, [(U64_MAX - 3, U64_MAX - 2), (U64_MAX - 1, U64_MAX)]),
    ],
)
def test_batch_ids_table(
    data_index: int, batch_size: int, n: int, expected: list[tuple[int, int]]
) -> None:
    assert get_batch_ids_for_round(data_index, batch_size, n) == [BatchId(*e) for e in expected]


@pytest.mark.parametrize(
    ("data_index", "batch_size", "n"), [(-1, 4, 2), (0, -4, 2), (0, 4, -2), (U64_MAX, 2, 1)]
)
def test_batch_ids_reject_bad_input(data_index: int, batch_size: int, n: int) -> None:
    with pytest.raises(ValueError):
        get_batch_ids_for_round(data_index, batch_size, n)


@settings(max_examples=100, deadline=None)
@given(
    data_index=st.integers(min_value=0, max_value=1 << 50),
    batch_size=st.integers(min_value=0, max_value=5000),
    n=st.integers(min_value=0, max_value=300),
)
def test_batch_ids_are_contiguous_disjoint_and_cover_exactly(
    data_index: int, batch_size: int, n: int
) -> None:
    ids = get_batch_ids_for_round(data_index, batch_size, n)
    covered = batch_size if n > 0 else 0
    assert sum(b.size for b in ids) == covered
    assert len(ids) == min(n, batch_size)
    if ids:
        assert ids[0].start == data_index
        assert ids[-1].end == data_index + batch_size - 1
        assert max(b.size for b in ids) - min(b.size for b in ids) <= 1
    for prev, cur in itertools.pairwise(ids):
        assert cur.start == prev.end + 1
        assert prev.size >= cur.size  # larger intervals first


# --- assign_data_for_state ---------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=40),
    seed=st.integers(min_value=0, max_value=U64_MAX),
    data_index=st.integers(min_value=0, max_value=1 << 40),
    batch_size=st.integers(min_value=0, max_value=200),
)
def test_assignment_covers_the_round_once_per_trainer(
    n: int, seed: int, data_index: int, batch_size: int
) -> None:
    result = assign(n, seed, data_index, batch_size)
    assert list(result) == get_batch_ids_for_round(data_index, batch_size, n)
    assert len(set(result.values())) == len(result)
    assert set(result.values()) <= set(clients(n))
    assert result == assign(n, seed, data_index, batch_size)


def test_assignment_follows_the_lcg_shuffle_of_trainers() -> None:
    nodes = clients(7)
    seed = 31337
    result = assign_data_for_state(nodes, selection(7, seed), 50, 20, seed)
    shuffled = deterministic_shuffle(nodes, seed)
    assert list(result.values()) == shuffled
    assert list(result) == get_batch_ids_for_round(50, 20, 7)
    assert [b.size for b in result] == [3] * 6 + [2]


def test_batch_smaller_than_trainers_leaves_some_without_data() -> None:
    nodes = clients(10)
    result = assign_data_for_state(nodes, selection(10, 3), 0, 4, 3)
    assert [(b.start, b.end) for b in result] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert list(result.values()) == deterministic_shuffle(nodes, 3)[:4]


def test_empty_clients_get_empty_assignment() -> None:
    assert assign_data_for_state([], selection(0, 1), 0, 16, 1) == {}


def test_one_client_gets_the_whole_batch() -> None:
    result = assign(1, 5, 1000, 64)
    assert list(result.items()) == [(BatchId(1000, 1063), clients(1)[0])]


def test_different_seeds_rotate_the_assignment() -> None:
    a = assign(16, 1, 0, 64)
    b = assign(16, 2, 0, 64)
    assert list(a) == list(b)
    assert list(a.values()) != list(b.values())


def test_verifiers_are_rejected() -> None:
    nodes = clients(10)
    with pytest.raises(ValueError, match="verification_percent"):
        assign_data_for_state(nodes, selection(10, 1, vp=50), 0, 10, 1)


def test_tie_breakers_are_rejected() -> None:
    nodes = clients(4)
    with pytest.raises(ValueError, match="TieBreaker"):
        assign_data_for_state(nodes, selection(4, 1, tb=1), 0, 10, 1)


def test_more_clients_than_the_selection_covers_is_an_error() -> None:
    with pytest.raises(ValueError):
        assign_data_for_state(clients(5), selection(3, 1), 0, 10, 1)


# --- retries (no lost work) --------------------------------------------------------------


def _ids(pairs: list[tuple[int, int]]) -> list[BatchId]:
    return [BatchId(a, b) for a, b in pairs]


@pytest.mark.parametrize(
    ("n", "data_index", "batch_size", "retries", "fresh_ids"),
    [
        # k = 0: exactly the assignment without retries.
        (4, 100, 10, [], [(100, 102), (103, 105), (106, 107), (108, 109)]),
        # 0 < k < n - 1: the others share the fresh samples from data_index.
        (4, 100, 10, [(0, 1), (50, 52)], [(100, 102), (103, 104)]),
        # k = n - 1: one trainer takes all the fresh samples.
        (3, 20, 9, [(0, 2), (5, 6)], [(20, 23)]),
        # k = n - 1 with no fresh samples left: the last trainer gets nothing.
        (3, 20, 5, [(0, 2), (5, 6)], []),
        # k = n with fresh = 0: every trainer retries one interval.
        (2, 20, 5, [(0, 2), (5, 6)], []),
        # more fresh slots than fresh samples: zero-size slots get no entry.
        (6, 7, 4, [(0, 1)], [(7, 7), (8, 8)]),
    ],
)
def test_assignment_with_retries(
    n: int,
    data_index: int,
    batch_size: int,
    retries: list[tuple[int, int]],
    fresh_ids: list[tuple[int, int]],
) -> None:
    seed = 0xC0FFEE
    nodes = clients(n)
    retry_ids = _ids(retries)
    result = assign_data_for_state(
        nodes, selection(n, seed), data_index, batch_size, seed, retry_ids
    )
    shuffled = deterministic_shuffle(nodes, seed)
    # The first k shuffled trainers get the retries whole, in order.
    assert [result[b] for b in retry_ids] == shuffled[: len(retries)]
    fresh = [b for b in result if b not in retry_ids]
    assert [(b.start, b.end) for b in fresh] == fresh_ids
    assert [result[b] for b in fresh] == shuffled[len(retries) : len(retries) + len(fresh)]
    # Ordered by start; one interval per trainer; retried + fresh samples = batch size.
    assert list(result) == sorted(result)
    assert len(set(result.values())) == len(result)
    assert sum(b.size for b in result) == batch_size
    assert list(result) == get_batch_ids_for_round(data_index, batch_size, n, retry_ids)


@pytest.mark.parametrize(
    ("n", "batch_size", "retries", "message"),
    [
        (1, 4, [(0, 0), (1, 1)], "2 retried intervals for only 1 trainers"),
        (0, 4, [(0, 0)], "1 retried intervals for only 0 trainers"),
        (3, 2, [(0, 2)], "more than the batch size"),
        (2, 8, [(0, 1), (2, 3)], "4 fresh samples remain"),
    ],
)
def test_retries_that_break_the_preconditions_are_rejected(
    n: int, batch_size: int, retries: list[tuple[int, int]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        assign_data_for_state(clients(n), selection(n, 1), 0, batch_size, 1, _ids(retries))
    with pytest.raises(ValueError, match=message):
        get_batch_ids_for_round(0, batch_size, n, _ids(retries))


def test_no_retries_and_no_trainers_is_still_empty() -> None:
    assert assign_data_for_state([], selection(0, 1), 0, 16, 1, []) == {}
    assert get_batch_ids_for_round(0, 16, 0, []) == []


# --- cost at scale (issue 38) ------------------------------------------------------------


@pytest.mark.parametrize("n", [4, 64, 256])
def test_assignment_hashes_grow_with_blocks_of_256_not_with_clients(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every client computes the whole round's assignment; at 180 hashes per client (one index of
    # the swap-or-not shuffle at a time) that was 46,080 hashes per client and round at 256.
    import hashlib

    import psyche.protocol.shuffle as shuffle

    calls = 0
    real = hashlib.sha256

    def counting(*args: bytes) -> hashlib._Hash:
        nonlocal calls
        calls += 1
        return real(*args)

    nodes, sel = clients(n), selection(n, 7)
    monkeypatch.setattr(shuffle.hashlib, "sha256", counting)
    got = assign_data_for_state(nodes, sel, 0, 2 * n, 7)
    monkeypatch.undo()
    assert len(got) == n
    # One hash per shuffle round, whatever n: the pivot's and the bit-source blocks' hashes
    # continue copies of it (at most 1 + ⌈n/256⌉ digests per round).
    assert calls == shuffle.SHUFFLE_ROUNDS
