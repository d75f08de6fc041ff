"""Token-file layouts: parsed .npy headers, raw files, and the errors for bad ones."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from psyche.data.provider import DataError
from psyche.data.tokenfiles import list_token_files, read_local_layout
from psyche.protocol.locations import TokenSize

from .helpers import write_npy, write_raw


@pytest.mark.parametrize("dtype", ["<u2", "<u4", "<i4"])
def test_npy_header_is_parsed_and_dtype_comes_from_the_file(tmp_path: Path, dtype: str) -> None:
    tokens = np.arange(1000, dtype=dtype)
    path = write_npy(tmp_path / "a.npy", tokens)
    layout = read_local_layout(path, TokenSize.FourBytes if dtype == "<u2" else TokenSize.TwoBytes)
    assert layout.dtype == np.dtype(dtype)
    assert layout.n_tokens == 1000
    raw = path.read_bytes()[layout.data_offset :]
    assert np.array_equal(np.frombuffer(raw, dtype=dtype), tokens)


def test_npy_two_dimensional_c_order_counts_all_tokens(tmp_path: Path) -> None:
    path = write_npy(tmp_path / "a.npy", np.arange(60, dtype="<u2").reshape(6, 10))
    assert read_local_layout(path, TokenSize.TwoBytes).n_tokens == 60


def test_npy_version_2_header(tmp_path: Path) -> None:
    path = tmp_path / "v2.npy"
    with path.open("wb") as f:
        np.lib.format.write_array(f, np.arange(7, dtype="<u4"), version=(2, 0))
    layout = read_local_layout(path, TokenSize.TwoBytes)
    assert (layout.n_tokens, layout.itemsize) == (7, 4)
    assert path.read_bytes()[6] == 2


@pytest.mark.parametrize("dtype", ["<i8", ">u2", "<f4", "|u1", "<i2"])
def test_npy_with_a_non_token_dtype_is_rejected(tmp_path: Path, dtype: str) -> None:
    path = write_npy(tmp_path / "bad.npy", np.arange(10).astype(dtype))
    with pytest.raises(DataError, match=r"bad\.npy.*not a token dtype"):
        read_local_layout(path, TokenSize.TwoBytes)


def test_npy_fortran_order_is_rejected(tmp_path: Path) -> None:
    path = write_npy(tmp_path / "f.npy", np.asfortranarray(np.zeros((4, 3), dtype="<u2")))
    with pytest.raises(DataError, match="fortran_order"):
        read_local_layout(path, TokenSize.TwoBytes)


def test_truncated_npy_is_rejected(tmp_path: Path) -> None:
    path = write_npy(tmp_path / "t.npy", np.arange(100, dtype="<u2"))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(DataError, match="truncated"):
        read_local_layout(path, TokenSize.TwoBytes)


def test_npy_header_that_is_not_a_literal_is_rejected(tmp_path: Path) -> None:
    header = b"{'descr': __import__('os'), }".ljust(118) + b"\n"
    path = tmp_path / "evil.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
    with pytest.raises(DataError, match="not a Python literal"):
        read_local_layout(path, TokenSize.TwoBytes)


@pytest.mark.parametrize(
    ("size", "dtype"), [(TokenSize.TwoBytes, "<u2"), (TokenSize.FourBytes, "<u4")]
)
def test_raw_bin_uses_the_configured_token_size(
    tmp_path: Path, size: TokenSize, dtype: str
) -> None:
    path = write_raw(tmp_path / "a.bin", np.arange(50, dtype=dtype))
    path.write_bytes(path.read_bytes() + b"\x01")  # a trailing partial token is ignored
    layout = read_local_layout(path, size)
    assert (layout.dtype, layout.data_offset, layout.n_tokens) == (np.dtype(dtype), 0, 50)


def test_headerless_npy_is_read_raw_like_the_reference_nanosets(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "nanoset.npy", np.arange(20, dtype="<u2"))
    layout = read_local_layout(path, TokenSize.TwoBytes)
    assert (layout.data_offset, layout.n_tokens) == (0, 20)


def test_token_files_are_sorted_by_name_and_filtered(tmp_path: Path) -> None:
    for name in ["b.bin", "a.npy", "C.ds", "notes.txt", "a10.bin", "a2.bin"]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub.bin").mkdir()
    names = [p.name for p in list_token_files(tmp_path)]
    assert names == ["C.ds", "a.npy", "a10.bin", "a2.bin", "b.bin"]
