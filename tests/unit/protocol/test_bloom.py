"""The 3072-bit, seed-keyed witness bloom filter."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psyche.protocol.bloom import Bloom, fnv1a64, splitmix64_keys

U64_MAX = (1 << 64) - 1
FNV_OFFSET_BASIS = 0xCBF29CE484222325


def item(i: int, tag: bytes = b"item") -> bytes:
    return hashlib.sha256(tag + i.to_bytes(4, "little")).digest()


def test_sizes() -> None:
    assert (Bloom.BITS, Bloom.WORDS, Bloom.KEYS) == (3072, 48, 8)
    assert len(Bloom(0).to_bytes()) == 392


def test_splitmix64_known_outputs() -> None:
    # First outputs of splitmix64 from state 0 (Vigna's reference generator).
    assert splitmix64_keys(0, 4) == (
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
        0xF88BB8A8724C81EC,
    )


@pytest.mark.parametrize(
    ("data", "digest"),
    [(b"", FNV_OFFSET_BASIS), (b"a", 0xAF63DC4C8601EC8C), (b"foobar", 0x85944171F73967E8)],
)
def test_fnv1a64_with_the_standard_basis_matches_fnv(data: bytes, digest: int) -> None:
    assert fnv1a64(FNV_OFFSET_BASIS, data) == digest


@pytest.mark.parametrize("seed", [0, 1, 0xDEADBEEF, U64_MAX])
def test_keys_are_the_first_eight_splitmix_outputs(seed: int) -> None:
    f = Bloom(seed)
    assert f.keys == splitmix64_keys(seed, 8)
    assert len(set(f.keys)) == 8
    assert f.seed == seed


def test_empty_filter() -> None:
    f = Bloom.empty()
    assert f.seed == 0
    assert f.is_empty()
    assert f.words == (0,) * 48
    assert not f.contains(item(0))
    assert item(0) not in f


def test_add_sets_the_bits_at_its_positions_lsb_first() -> None:
    f = Bloom(77)
    x = item(1)
    f.add(x)
    assert not f.is_empty()
    assert f.contains(x)
    assert x in f
    expected = [0] * 48
    for key, pos in zip(f.keys, f.positions(x), strict=True):
        assert pos == fnv1a64(key, x) % 3072
        expected[pos // 64] |= 1 << (pos % 64)
    assert list(f.words) == expected
    assert 1 <= sum(w.bit_count() for w in f.words) <= 8


def test_contains_operator_rejects_non_bytes() -> None:
    f = Bloom(1)
    f.add(b"")
    assert b"" in f
    assert bytearray() in f
    assert "" not in f
    assert None not in f


def test_different_seeds_hash_differently() -> None:
    assert Bloom(1).positions(item(0)) != Bloom(2).positions(item(0))


def test_false_positive_rate_is_well_under_one_percent_at_256_items() -> None:
    f = Bloom(0x5EED)
    f.add_all(item(i) for i in range(256))
    assert all(f.contains(item(i)) for i in range(256))
    probes = 20000
    false_positives = sum(f.contains(item(i, b"probe")) for i in range(probes))
    theoretical = (1 - math.exp(-8 * 256 / 3072)) ** 8
    assert 0.002 < theoretical < 0.004
    assert false_positives / probes < 0.01


# --- encodings ---------------------------------------------------------------------------


def test_byte_layout_is_seed_then_words_little_endian() -> None:
    f = Bloom(0x0102030405060708)
    f.add(item(3))
    raw = f.to_bytes()
    assert raw[:8] == bytes([8, 7, 6, 5, 4, 3, 2, 1])
    words = [int.from_bytes(raw[8 + 8 * i : 16 + 8 * i], "little") for i in range(48)]
    assert tuple(words) == f.words
    assert Bloom.from_bytes(raw) == f
    assert Bloom.from_bytes(bytearray(raw)) == f  # type: ignore[arg-type]


@pytest.mark.parametrize("length", [0, 8, 384, 391, 393, 400])
def test_from_bytes_rejects_wrong_length(length: int) -> None:
    with pytest.raises(ValueError, match="392"):
        Bloom.from_bytes(b"\x00" * length)


def test_json_round_trip() -> None:
    f = Bloom(U64_MAX)
    f.add_all(item(i) for i in range(10))
    obj = f.to_json()
    assert obj["seed"] == U64_MAX
    assert len(obj["words"]) == 48
    assert Bloom.from_json(obj) == f


GOOD_WORDS = [0] * 48


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"seed": 0},
        {"words": GOOD_WORDS},
        {"seed": 0, "words": GOOD_WORDS, "extra": 1},
        {"seed": -1, "words": GOOD_WORDS},
        {"seed": U64_MAX + 1, "words": GOOD_WORDS},
        {"seed": "0", "words": GOOD_WORDS},
        {"seed": True, "words": GOOD_WORDS},
        {"seed": 0.0, "words": GOOD_WORDS},
        {"seed": 0, "words": [0] * 47},
        {"seed": 0, "words": [0] * 49},
        {"seed": 0, "words": [-1] + [0] * 47},
        {"seed": 0, "words": [U64_MAX + 1] + [0] * 47},
        {"seed": 0, "words": [1.5] + [0] * 47},
        {"seed": 0, "words": [False] + [0] * 47},
        {"seed": 0, "words": "0" * 48},
        {"seed": 0, "words": None},
        [],
    ],
)
def test_from_json_rejects_malformed_objects(obj: Any) -> None:
    with pytest.raises(ValueError):
        Bloom.from_json(obj)


@pytest.mark.parametrize(
    ("seed", "words"),
    [
        (-1, None),
        (U64_MAX + 1, None),
        (0, [0] * 47),
        (0, (1 << 64,) + (0,) * 47),
        (0, b"\x00" * 48),
    ],
)
def test_constructor_validates(seed: int, words: Any) -> None:
    with pytest.raises(ValueError):
        Bloom(seed, words)


def test_equality_copy_and_unhashable() -> None:
    a = Bloom(5)
    a.add(b"x")
    b = a.copy()
    assert a == b
    b.add(b"y")
    assert a != b
    assert Bloom(1) != Bloom(2)
    assert Bloom(1) != "not a bloom"
    with pytest.raises(TypeError):
        hash(a)
    assert "bits_set=" in repr(a)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=U64_MAX),
    items=st.lists(st.binary(max_size=40), max_size=40),
)
def test_no_false_negatives_and_round_trips(seed: int, items: list[bytes]) -> None:
    f = Bloom(seed)
    f.add_all(items)
    assert all(x in f for x in items)
    assert Bloom.from_bytes(f.to_bytes()) == f
    assert Bloom.from_json(f.to_json()) == f
    assert f.is_empty() == (not items)
