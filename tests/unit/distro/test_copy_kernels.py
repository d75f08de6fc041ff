"""The copy check's compiled loops (psyche.distro.copy_kernels; issue 38): the sketch they make is
the one the numpy code before them made, value for value (so every decision of the check is
unchanged), and the hash tables that replaced the index's dicts hold and find what a dict of lists
would."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psyche.distro import copy_index
from psyche.distro.copy_index import BANDS, BINS, EMPTY, ROWS, _plan, sketch
from psyche.distro.copy_kernels import HashTable, mix

U64 = npt.NDArray[np.uint64]


def _mix(x: U64) -> U64:
    """splitmix64's finaliser, elementwise in numpy (as the sketch's numpy code had it)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def numpy_sketch(
    keys: npt.NDArray[np.int64], sizes: tuple[int, ...], repeatable: tuple[bool, ...], salt: int
) -> tuple[U64, tuple[int, ...], tuple[int, ...]]:
    """The sketch as the numpy code made it before the compiled loop (ece199d and earlier):
    bins, band keys, tensor key-set hashes."""
    plan = _plan(sizes, repeatable, salt)
    hashed = _mix(np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64) ^ plan.tensor_const)
    h = hashed[None, :] * plan.pass_mul[:, None]
    slot_base = (np.arange(plan.pass_mul.size, dtype=np.int64) * plan.per_pass)[:, None]
    if plan.shift < 64:
        slot = (h >> plan.shift).view(np.int64) + slot_base
    else:
        slot = np.broadcast_to(slot_base, h.shape)
    bins = np.full(plan.pass_mul.size * plan.per_pass, EMPTY, dtype=np.uint64)
    np.minimum.at(bins, slot.reshape(-1), h.reshape(-1))
    bins = bins[:BINS]
    rows = bins.reshape(BANDS, ROWS)
    band = rows @ plan.band_row + plan.band_const
    band = band[(rows != EMPTY).all(axis=1)]
    tensors = tuple(
        int(hashed[a:b].sum(dtype=np.uint64))
        for a, b in zip(plan.rep_first, plan.rep_end, strict=True)
    )
    return bins, tuple(band.tolist()), tensors


LAYOUTS = [
    ((), ()),  # no keys
    ((5,), (False,)),  # fewer than 2·FILL keys: one bin per pass
    ((7, 9), (True, False)),
    ((300, 300, 300), (True, True, False)),
    ((64, 2048, 336), (False, True, True)),  # the tiny preset's scale (2,448 keys)
    ((20_000,), (True,)),  # one pass of 1,024 bins
]


@pytest.mark.parametrize(("sizes", "repeatable"), LAYOUTS)
@pytest.mark.parametrize("salt", [0, 1, 2**64 - 1, 0x5EED_1234_ABCD])
def test_the_compiled_sketch_is_the_numpy_sketch(
    sizes: tuple[int, ...], repeatable: tuple[bool, ...], salt: int
) -> None:
    rng = np.random.default_rng(sum(sizes) + salt % 1000)
    keys = rng.integers(-(2**62), 2**62, sum(sizes), dtype=np.int64)
    keys[: min(3, keys.size)] = [-1, 0, 2**63 - 1][: min(3, keys.size)]  # the edges of int64
    got = sketch(b"f", copy_index.CopyKeys(keys, sizes, repeatable), salt)
    bins, bands, tensors = numpy_sketch(keys, sizes, repeatable, salt)
    assert got.bins is not None and np.array_equal(got.bins, bins)
    assert got.bands == bands and got.tensors == tensors
    assert got.scheme == (salt, sum(sizes)) and got.fingerprint == b"f"


def test_mix_is_splitmix64s_finaliser() -> None:
    values = np.array([0, 1, 2**63, 2**64 - 1, 0x0123_4567_89AB_CDEF], dtype=np.uint64)
    assert [int(mix(v)) for v in values] == _mix(values).tolist()
    # splitmix64's first output from seed 0 (its state advanced once by the golden ratio).
    assert int(mix(np.uint64(0))) == 0xE220A8397B1DCDAF


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 2)), min_size=0, max_size=400
    ),
    st.lists(st.integers(0, 2**64 - 1), min_size=0, max_size=40),
)
def test_a_hash_table_finds_what_a_dict_of_lists_would(
    pairs: list[tuple[int, int]], probes: list[int]
) -> None:
    table = HashTable(capacity=16)  # small, so that adding grows it
    model: dict[int, list[int]] = {}
    for key, value in pairs:
        table.add(np.array([key], dtype=np.uint64), np.array([value], dtype=np.uint64))
        model.setdefault(key, []).append(value)
    assert table.count == len(pairs) and 2 * table.count <= table.capacity
    for key in [k for k, _ in pairs[:40]] + probes:
        found = table.find(np.array([key], dtype=np.uint64))
        assert sorted(found.tolist()) == sorted(model.get(key, []))


def test_a_lookup_of_many_keys_returns_every_match() -> None:
    """Many keys at once, each held by several values: more matches than the first buffer."""
    table = HashTable()
    keys = np.arange(1, 101, dtype=np.uint64) * np.uint64(0x9E37_79B9)
    for value in range(5):
        table.add(keys, np.full(keys.size, value, dtype=np.uint64))
    found = table.find(np.concatenate([keys, np.array([7, 8], dtype=np.uint64)]))
    assert found.size == 500
    assert np.bincount(found.astype(np.int64)).tolist() == [100] * 5


def test_a_table_stays_at_most_half_full_as_it_grows() -> None:
    table = HashTable(capacity=4)
    rng = np.random.default_rng(5)
    for value in range(300):
        keys = rng.integers(0, 2**63, 204, dtype=np.int64).view(np.uint64)
        table.add(keys, np.full(204, value, dtype=np.uint64))
        assert 2 * table.count <= table.capacity
    assert table.count == 300 * 204
    assert math.log2(table.capacity).is_integer()
    assert sorted(table.find(keys).tolist()) == [299] * 204  # the last keys, after the growth
