"""Preprocessed: pre-tokenized Parquet rows (``inputs`` of exactly max_seq_len ids), made here by
the test, read through the same factory the client uses; every client numbers rows alike."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from psyche.data.factory import provider_for_location
from psyche.data.provider import DataError
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import PreprocessedData

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:  # an optional package here: the client says so in one line (last test)
    pa = pq = None

needs_pyarrow = pytest.mark.skipif(pa is None, reason="pyarrow is not installed")

L = 6


def _write(path: Path, first: int, rows: int, **extra: object) -> None:
    # Row r of this file holds tokens all equal to first + r.
    inputs = [[first + r] * L for r in range(rows)]
    pq.write_table(pa.table({"inputs": inputs, **extra}), path)


@needs_pyarrow
def test_rows_in_file_name_order_ids_wrap_and_clients_agree(tmp_path: Path) -> None:
    # Written out of order: numbering follows file names, not creation or listing order.
    _write(tmp_path / "b.parquet", 100, 3)
    _write(tmp_path / "a.parquet", 0, 4, labels=[[1] * L] * 4, sequence_lengths=[[L]] * 4)
    (tmp_path / "notes.txt").write_text("not data")
    a = provider_for_location(PreprocessedData(str(tmp_path)), L)
    b = provider_for_location(PreprocessedData(str(tmp_path)), L)
    assert a.num_samples == 7 and a.seq_len == L
    got = a.get_samples(BatchId(0, 15)).numpy()
    assert got.dtype == np.int64 and got.shape == (16, L)
    expected = [0, 1, 2, 3, 100, 101, 102]
    assert [int(r[0]) for r in got] == [expected[i % 7] for i in range(16)]
    assert np.array_equal(got, b.get_samples(BatchId(0, 15)).numpy())
    assert np.array_equal(a.get_samples(BatchId(5, 5)).numpy(), got[5:6])


@needs_pyarrow
def test_one_file_and_other_integer_types(tmp_path: Path) -> None:
    f = tmp_path / "one.parquet"
    col = pa.array([[7] * L, [9] * L], type=pa.list_(pa.uint16()))
    pq.write_table(pa.table({"inputs": col}), f)
    p = provider_for_location(PreprocessedData(str(f)), L)
    assert p.get_samples(BatchId(0, 2)).numpy()[:, 0].tolist() == [7, 9, 7]


@needs_pyarrow
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: None, "no .parquet files"),
        (lambda d: pq.write_table(pa.table({"text": ["a"]}), d / "x.parquet"), "no `inputs`"),
        (lambda d: (d / "x.parquet").write_bytes(b"junk"), "not a readable Parquet file"),
        (lambda d: pq.write_table(pa.table({"inputs": [[1] * (L + 1)]}), d / "x.parquet"),
         "row 0: `inputs` has 7 tokens, the run's max_seq_len is 6"),
        (lambda d: pq.write_table(pa.table({"inputs": [["a"] * L]}), d / "x.parquet"),
         "not a list of integers"),
        (lambda d: pq.write_table(pa.table({"inputs": [[-1] * L]}), d / "x.parquet"),
         "negative token id"),
        (lambda d: pq.write_table(pa.table({"inputs": [None, [1] * L]}), d / "x.parquet"),
         "null rows"),
    ],
)  # fmt: skip
def test_bad_data_is_one_clear_error(tmp_path: Path, make: object, message: str) -> None:
    make(tmp_path)  # type: ignore[operator]
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        provider_for_location(PreprocessedData(str(tmp_path)), L)


def test_a_dataset_id_is_not_downloaded(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"not a local file or directory.*huggingface-cli download"):
        provider_for_location(PreprocessedData("someorg/some-dataset"), L)


def test_without_pyarrow_the_location_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    for name in ("pyarrow", "pyarrow.compute", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    with pytest.raises(DataError, match=r"needs the pyarrow package.*\(pip install pyarrow\)"):
        provider_for_location(PreprocessedData(str(tmp_path)), L)
