"""LocalDataProvider and the sample-index rules (order, every sequence, wrap, shuffle)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from psyche.data.local import LocalDataProvider
from psyche.data.provider import DataError, SampleIndex, shuffle_key
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import DontShuffle, SeededShuffle, TokenSize
from psyche.protocol.shuffle import compute_shuffled_index, shuffled_positions

from .helpers import write_npy, write_raw

L = 8


def _corpus(tmp_path: Path) -> list[np.ndarray]:
    """Three files written out of name order; token values encode (file, position)."""
    a = np.arange(3 * L, dtype="<u2") + 1000  # exactly 3 sequences: the last one must count
    b = np.arange(2 * L + 5, dtype="<u4") + 2000  # 2 sequences and a 5-token tail
    c = np.arange(L - 1, dtype="<u2") + 3000  # too short: no sequence
    write_npy(tmp_path / "b.npy", b)
    write_npy(tmp_path / "c.npy", c)
    write_npy(tmp_path / "a.npy", a)
    return [a, b, c]


def _expected_rows(files: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([f[: len(f) // L * L].astype(np.int64).reshape(-1, L) for f in files])


def test_every_full_sequence_in_sorted_file_order(tmp_path: Path) -> None:
    files = _corpus(tmp_path)
    p = LocalDataProvider(tmp_path, L)
    assert p.num_samples == 5
    assert [f.name for f in p.files] == ["a.npy", "b.npy", "c.npy"]
    got = p.get_samples(BatchId(0, 4))
    assert got.dtype == torch.int64 and got.shape == (5, L)
    assert np.array_equal(got.numpy(), _expected_rows(files))


def test_batch_across_a_file_boundary_and_single_ids(tmp_path: Path) -> None:
    rows = _expected_rows(_corpus(tmp_path))
    p = LocalDataProvider(tmp_path, L)
    assert np.array_equal(p.get_samples(BatchId(2, 3)).numpy(), rows[2:4])
    for i in range(5):
        assert np.array_equal(p.get_samples(BatchId(i, i)).numpy(), rows[i : i + 1])


def test_ids_wrap_modulo_the_dataset(tmp_path: Path) -> None:
    rows = _expected_rows(_corpus(tmp_path))
    p = LocalDataProvider(tmp_path, L)
    got = p.get_samples(BatchId(3, 11)).numpy()
    assert np.array_equal(got, rows[[i % 5 for i in range(3, 12)]])
    big = 2**64 - 1
    assert np.array_equal(p.get_samples(BatchId(big, big)).numpy(), rows[[big % 5]])


def test_raw_files_use_token_size(tmp_path: Path) -> None:
    tokens = np.arange(4 * L, dtype="<u4") + 70000
    write_raw(tmp_path / "x.bin", tokens)
    p = LocalDataProvider(tmp_path, L, TokenSize.FourBytes)
    assert np.array_equal(p.get_samples(BatchId(0, 3)).numpy().ravel(), tokens)


def test_no_files_or_no_full_sequence_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no token files"):
        LocalDataProvider(tmp_path, L)
    write_npy(tmp_path / "short.npy", np.arange(L - 1, dtype="<u2"))
    with pytest.raises(DataError, match="no full sequence"):
        LocalDataProvider(tmp_path, L)


def test_negative_tokens_are_rejected(tmp_path: Path) -> None:
    write_npy(tmp_path / "neg.npy", np.full(L, -1, dtype="<i4"))
    with pytest.raises(DataError, match="negative token"):
        LocalDataProvider(tmp_path, L).get_samples(BatchId(0, 0))


def _seed(n: int) -> SeededShuffle:
    return SeededShuffle(tuple(hashlib.sha256(bytes([n])).digest()))


def test_seeded_shuffle_is_a_deterministic_permutation(tmp_path: Path) -> None:
    rows = _expected_rows(_corpus(tmp_path))
    one = LocalDataProvider(tmp_path, L, shuffle=_seed(1)).get_samples(BatchId(0, 4)).numpy()
    again = LocalDataProvider(tmp_path, L, shuffle=_seed(1)).get_samples(BatchId(0, 4)).numpy()
    assert np.array_equal(one, again)
    assert sorted(map(tuple, one)) == sorted(map(tuple, rows))  # a permutation: all present


def test_different_seeds_give_different_orders() -> None:
    a = SampleIndex([1000], _seed(1)).pointers(BatchId(0, 999))
    b = SampleIndex([1000], _seed(2)).pointers(BatchId(0, 999))
    assert sorted(a) == sorted(b) == list(range(1000))
    assert a != b
    assert SampleIndex([1000], DontShuffle()).pointers(BatchId(0, 999)) == list(range(1000))


def test_shuffle_rule_is_swap_or_not_with_the_documented_key() -> None:
    seed = bytes(range(32))
    key = hashlib.sha256(seed + b"psyche-data-shuffle").digest()
    assert shuffle_key(seed) == key
    n = 1234
    ids = [*range(0, 300), 700, 5, 1233]
    assert shuffled_positions(ids, n, key) == [compute_shuffled_index(i, n, key) for i in ids]
    idx = SampleIndex([n], SeededShuffle(tuple(seed)))
    assert idx.pointers(BatchId(n + 7, n + 9)) == [
        compute_shuffled_index(i, n, key) for i in (7, 8, 9)
    ]


def test_pinned_shuffle_vector() -> None:
    # Pins the rule for other implementations: seed = 32 zero bytes, N = 10, ids 0..9.
    idx = SampleIndex([10], SeededShuffle((0,) * 32))
    assert idx.pointers(BatchId(0, 9)) == PINNED


PINNED = [0, 7, 2, 1, 4, 6, 9, 3, 8, 5]


def test_runs_coalesce_contiguous_sequences_per_file() -> None:
    idx = SampleIndex([3, 2, 4], DontShuffle())
    assert idx.runs(BatchId(1, 7)) == [(0, 1, 2, 0), (1, 0, 2, 2), (2, 0, 3, 4)]
    assert idx.runs(BatchId(8, 10)) == [(2, 3, 1, 0), (0, 0, 2, 1)]  # wraps to file 0


def test_only_a_few_files_stay_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import psyche.data.local as local_mod

    monkeypatch.setattr(local_mod, "MAX_OPEN_FILES", 2)
    files = [np.arange(L, dtype="<u2") + 10 * i for i in range(5)]
    for i, f in enumerate(files):
        write_npy(tmp_path / f"{i}.npy", f)
    p = LocalDataProvider(tmp_path, L)
    for _ in range(2):
        assert np.array_equal(p.get_samples(BatchId(0, 4)).numpy(), np.stack(files))
    assert len(p._maps) == 2
