"""Swap-or-not index shuffle, the LCG and the LCG-driven Fisher–Yates shuffle."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psyche.protocol.shuffle import (
    LCG_INCREMENT,
    LCG_MULTIPLIER,
    Lcg,
    compute_shuffled_index,
    deterministic_shuffle,
    shuffled_positions,
)

U64_MAX = (1 << 64) - 1
SEED_A = hashlib.sha256(b"seed a").digest()
SEED_B = hashlib.sha256(b"seed b").digest()
seeds32 = st.binary(min_size=32, max_size=32)

# Independent known answers: the Ethereum-2 swap-or-not test vectors (90 rounds) published with
# protolambda/eth2-shuffle (spec/tests.csv). Each row shuffles `start` into `shuffled` where
# shuffled[compute_shuffled_index(i)] = start[i]; the seeds are sha256(u32_le(0)) and (1).
ETH2_ROWS = [
    (0, [2, 1, 0], [1, 0, 2]),
    (0, [3, 1, 4, 2, 0], [2, 3, 1, 0, 4]),
    (0, [8, 7, 5, 9, 2, 3, 6, 1, 4, 0], [2, 6, 9, 5, 7, 3, 4, 8, 1, 0]),
    (1, [2, 1, 0], [2, 1, 0]),
    (1, [3, 1, 4, 2, 0], [0, 2, 4, 1, 3]),
    (1, [8, 7, 5, 9, 2, 3, 6, 1, 4, 0], [1, 6, 8, 7, 2, 3, 0, 5, 4, 9]),
]


@pytest.mark.parametrize(("seed_index", "start", "shuffled"), ETH2_ROWS)
def test_matches_eth2_reference_vectors(
    seed_index: int, start: list[int], shuffled: list[int]
) -> None:
    seed = hashlib.sha256(seed_index.to_bytes(4, "little")).digest()
    n = len(start)
    out = [0] * n
    for i in range(n):
        out[compute_shuffled_index(i, n, seed)] = start[i]
    assert out == shuffled


@pytest.mark.parametrize("seed", [bytes(32), b"\xff" * 32, SEED_A])
def test_single_element_maps_to_zero(seed: bytes) -> None:
    assert compute_shuffled_index(0, 1, seed) == 0


@pytest.mark.parametrize(
    ("index", "n"),
    [(0, 0), (1, 1), (5, 5), (6, 5), (-1, 5), (0, -3), (0, U64_MAX + 1)],
)
def test_out_of_range_index_or_size_raises(index: int, n: int) -> None:
    with pytest.raises(ValueError):
        compute_shuffled_index(index, n, SEED_A)


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_seed_must_be_32_bytes(length: int) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        compute_shuffled_index(0, 4, b"\x01" * length)


def test_non_int_index_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        compute_shuffled_index(True, 4, SEED_A)


@pytest.mark.parametrize("n", [(1 << 32) + 5, 1 << 40, U64_MAX])
def test_large_n_stays_in_range(n: int) -> None:
    for index in (0, n // 3, n - 1):
        assert 0 <= compute_shuffled_index(index, n, SEED_A) < n


@settings(max_examples=40, deadline=None)
@given(n=st.integers(min_value=1, max_value=64), seed=seeds32)
def test_shuffled_index_is_a_permutation(n: int, seed: bytes) -> None:
    assert sorted(compute_shuffled_index(i, n, seed) for i in range(n)) == list(range(n))


@settings(max_examples=30, deadline=None)
@given(data=st.data(), seed=seeds32)
def test_same_seed_same_result(data: st.DataObject, seed: bytes) -> None:
    n = data.draw(st.integers(min_value=1, max_value=U64_MAX))
    index = data.draw(st.integers(min_value=0, max_value=n - 1))
    assert compute_shuffled_index(index, n, seed) == compute_shuffled_index(index, n, seed)


def test_different_seeds_give_different_permutations() -> None:
    n = 64
    a = [compute_shuffled_index(i, n, SEED_A) for i in range(n)]
    b = [compute_shuffled_index(i, n, SEED_B) for i in range(n)]
    assert a != b
    assert a != list(range(n))


def test_seed_may_be_a_bytearray() -> None:
    seed = bytearray(SEED_A)
    assert compute_shuffled_index(3, 10, seed) == compute_shuffled_index(3, 10, SEED_A)  # type: ignore[arg-type]


# --- LCG ---------------------------------------------------------------------------------


def test_lcg_first_outputs_follow_the_recurrence() -> None:
    rng = Lcg(0)
    assert rng.next() == LCG_INCREMENT
    assert rng.next() == (LCG_INCREMENT * LCG_MULTIPLIER + LCG_INCREMENT) % (1 << 64)
    assert rng.state == (LCG_INCREMENT * LCG_MULTIPLIER + LCG_INCREMENT) % (1 << 64)


@pytest.mark.parametrize("seed", [0, 1, 42, U64_MAX])
def test_lcg_returns_new_state_mod_2_64(seed: int) -> None:
    rng = Lcg(seed)
    state = seed
    for _ in range(5):
        state = (state * LCG_MULTIPLIER + LCG_INCREMENT) % (1 << 64)
        assert rng.next() == state


@pytest.mark.parametrize("seed", [-1, U64_MAX + 1])
def test_lcg_rejects_non_u64_seed(seed: int) -> None:
    with pytest.raises(ValueError):
        Lcg(seed)


# --- deterministic_shuffle ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "seed", "expected"),
    [
        ([], 0, []),
        ([], 7, []),
        (["x"], 0, ["x"]),
        (["x"], U64_MAX, ["x"]),
        # seed 0: next() = LCG_INCREMENT, odd -> j = 1 -> no swap.
        ([0, 1], 0, [0, 1]),
        # seed 1: next() = MULTIPLIER + INCREMENT, even -> j = 0 -> swap.
        ([0, 1], 1, [1, 0]),
    ],
)
def test_deterministic_shuffle_table(
    items: list[object], seed: int, expected: list[object]
) -> None:
    assert deterministic_shuffle(items, seed) == expected


def test_deterministic_shuffle_matches_a_hand_rolled_fisher_yates() -> None:
    items = list(range(20))
    rng = Lcg(99)
    expected = list(items)
    for i in range(len(expected) - 1, 0, -1):
        j = rng.next() % (i + 1)
        expected[i], expected[j] = expected[j], expected[i]
    assert deterministic_shuffle(items, 99) == expected


def test_deterministic_shuffle_does_not_mutate_and_accepts_any_sequence() -> None:
    items = (1, 2, 3, 4, 5)
    out = deterministic_shuffle(items, 5)
    assert items == (1, 2, 3, 4, 5)
    assert isinstance(out, list)
    # Same seed, same length: the same permutation whatever the element type.
    assert deterministic_shuffle("abcde", 5) == ["abcde"[v - 1] for v in out]


@settings(max_examples=50, deadline=None)
@given(
    items=st.lists(st.integers(), max_size=50),
    seed=st.integers(min_value=0, max_value=U64_MAX),
)
def test_deterministic_shuffle_is_a_stable_permutation(items: list[int], seed: int) -> None:
    out = deterministic_shuffle(items, seed)
    assert sorted(out) == sorted(items)
    assert out == deterministic_shuffle(items, seed)


def test_deterministic_shuffle_rejects_bad_seed() -> None:
    with pytest.raises(ValueError):
        deterministic_shuffle([1, 2], -1)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=700),
    seed=st.binary(min_size=32, max_size=32),
    data=st.data(),
)
def test_whole_permutation_at_once_matches_one_index_at_a_time(
    n: int, seed: bytes, data: st.DataObject
) -> None:
    # Sizes past 256 put positions in several bit-source blocks.
    indices = data.draw(st.lists(st.integers(min_value=0, max_value=n - 1), max_size=40))
    assert shuffled_positions(indices, n, seed) == [
        compute_shuffled_index(i, n, seed) for i in indices
    ]
    whole = shuffled_positions(range(n), n, seed)
    assert sorted(whole) == list(range(n))


def test_whole_permutation_refuses_what_one_index_refuses() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        shuffled_positions([0], 4, b"short")
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        shuffled_positions([4], 4, bytes(32))
    assert shuffled_positions([], 0, bytes(32)) == []
