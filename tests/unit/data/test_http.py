"""HttpDataProvider against a real HTTP server on 127.0.0.1 (also standing in for GCS)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from psyche.data.http import HttpDataProvider, numbered_file_urls
from psyche.data.local import LocalDataProvider
from psyche.data.provider import DataError
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import (
    DontShuffle,
    Gcp,
    NumberedFiles,
    SeededShuffle,
    SingleUrl,
    TokenSize,
)

from .conftest import FakeHost

L = 16
FAST: dict[str, Any] = {"retries": 2, "backoff": 0.01}


def _npy(tokens: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, tokens, allow_pickle=False)
    return buf.getvalue()


def _rows(tokens: np.ndarray) -> np.ndarray:
    return tokens[: len(tokens) // L * L].astype(np.int64).reshape(-1, L)


def test_single_url_npy(http_host: FakeHost) -> None:
    tokens = np.arange(5 * L + 3, dtype="<u2")
    http_host.files["/data/one.npy"] = _npy(tokens)
    loc = SingleUrl(f"{http_host.base_url}/data/one.npy")
    with HttpDataProvider.from_location(loc, L, TokenSize.FourBytes, DontShuffle(), **FAST) as p:
        assert p.num_samples == 5
        assert np.array_equal(p.get_samples(BatchId(0, 4)).numpy(), _rows(tokens))
        assert np.array_equal(p.get_samples(BatchId(6, 6)).numpy(), _rows(tokens)[1:2])  # wraps


def test_numbered_files_template() -> None:
    urls = numbered_file_urls("http://h/{}.ds", 8, 3, 3)
    assert urls == ["http://h/008.ds", "http://h/009.ds", "http://h/010.ds"]
    with pytest.raises(DataError, match="exactly once"):
        numbered_file_urls("http://h/{}-{}.ds", 0, 0, 1)


def test_numbered_raw_files_in_index_order(http_host: FakeHost) -> None:
    chunks = [np.arange(2 * L, dtype="<u4") + 100_000 * (i + 1) for i in range(3)]
    for i, c in enumerate(chunks):
        http_host.files[f"/shards/{i + 9:02d}.ds"] = c.tobytes()
    loc = NumberedFiles(
        url_template=f"{http_host.base_url}/shards/{{}}.ds",
        start_index=9,
        n_left_pad_zeros=2,
        num_files=3,
    )
    with HttpDataProvider.from_location(loc, L, TokenSize.FourBytes, DontShuffle(), **FAST) as p:
        got = p.get_samples(BatchId(0, 5)).numpy()
    assert np.array_equal(got, np.concatenate([_rows(c) for c in chunks]))


def test_gcs_listing_paginated_filtered_and_sorted_by_name(http_host: FakeHost) -> None:
    files = {
        "runs/b.npy": _npy(np.arange(2 * L, dtype="<u2") + 200),
        "runs/a.npy": _npy(np.arange(L, dtype="<u2") + 100),
        "runs/c.bin": (np.arange(L, dtype="<u2") + 300).tobytes(),
        "runs/readme.txt": b"not data",
        "other/z.npy": _npy(np.arange(L, dtype="<u2")),
    }
    for name, body in files.items():
        http_host.files[f"/bkt/{name}"] = body
    http_host.buckets["bkt"] = [{"name": n, "size": str(len(b))} for n, b in files.items()]
    loc = Gcp(bucket_name="bkt", filter_directory="runs/")
    with HttpDataProvider.from_location(
        loc, L, TokenSize.TwoBytes, DontShuffle(), gcs_base_url=http_host.base_url, **FAST
    ) as p:
        assert [u.rsplit("/", 1)[1] for u in p.urls] == ["a.npy", "b.npy", "c.bin"]
        got = p.get_samples(BatchId(0, 3)).numpy()
    assert list(got[:, 0]) == [100, 200, 200 + L, 300]
    pages = http_host.gets("/storage/v1/b/bkt/o")
    assert len(pages) == 2  # 4 items under the prefix, 2 per page
    assert not [e for e in http_host.log if e[0] == "HEAD"]  # listing sizes were used


def test_contiguous_runs_are_fetched_with_one_range_request(http_host: FakeHost) -> None:
    a, b = np.arange(4 * L, dtype="<u2"), np.arange(4 * L, dtype="<u2") + 5000
    http_host.files["/a.npy"], http_host.files["/b.npy"] = _npy(a), _npy(b)
    urls = [f"{http_host.base_url}/a.npy", f"{http_host.base_url}/b.npy"]
    with HttpDataProvider(urls, L, **FAST) as p:
        setup = len(http_host.gets())
        got = p.get_samples(BatchId(1, 6)).numpy()  # a[1..3] and b[0..2]: two runs
        ranges = [r for _, r in http_host.gets()[setup:]]
    assert np.array_equal(got, np.concatenate([_rows(a)[1:], _rows(b)[:3]]))
    off = len(_npy(a)) - a.nbytes  # header size
    assert sorted(ranges, key=str) == sorted(
        [f"bytes={off + 2 * L}-{off + 8 * L - 1}", f"bytes={off}-{off + 6 * L - 1}"], key=str
    )


def test_http_and_local_agree_with_a_shuffle(http_host: FakeHost, tmp_path: Path) -> None:
    seed = SeededShuffle(tuple(range(32)))
    for i, n in enumerate([3, 5, 2]):
        body = _npy(np.arange(n * L, dtype="<u2") + 1000 * i)
        (tmp_path / f"f{i}.npy").write_bytes(body)
        http_host.files[f"/f{i}.npy"] = body
    urls = [f"{http_host.base_url}/f{i}.npy" for i in range(3)]
    local = LocalDataProvider(tmp_path, L, TokenSize.TwoBytes, seed)
    with HttpDataProvider(urls, L, TokenSize.TwoBytes, seed, **FAST) as remote:
        batch = BatchId(4, 17)
        assert np.array_equal(remote.get_samples(batch).numpy(), local.get_samples(batch).numpy())


def test_wrong_length_is_an_error_after_retries(http_host: FakeHost) -> None:
    http_host.files["/x.bin"] = np.arange(4 * L, dtype="<u2").tobytes()
    with HttpDataProvider([f"{http_host.base_url}/x.bin"], L, **FAST) as p:
        http_host.short.add("/x.bin")
        with pytest.raises(DataError, match=r"expected 32 bytes, got 31"):
            p.get_samples(BatchId(0, 0))
        assert p.request_counts["GET"] == 3  # first try + 2 retries


def test_transient_5xx_is_retried(http_host: FakeHost) -> None:
    tokens = np.arange(2 * L, dtype="<u2")
    http_host.files["/x.bin"] = tokens.tobytes()
    with HttpDataProvider([f"{http_host.base_url}/x.bin"], L, **FAST) as p:
        http_host.fail_once.add("/x.bin")
        assert np.array_equal(p.get_samples(BatchId(0, 1)).numpy(), _rows(tokens))


def test_missing_file_fails_at_once(http_host: FakeHost) -> None:
    with pytest.raises(DataError, match="HTTP 404"):
        HttpDataProvider([f"{http_host.base_url}/missing.bin"], L, **FAST)
    assert len([e for e in http_host.log if e[0] == "HEAD"]) == 1


def test_bad_dtype_on_a_remote_npy_names_the_url(http_host: FakeHost) -> None:
    http_host.files["/f.npy"] = _npy(np.arange(4 * L, dtype="<f4"))
    with pytest.raises(DataError, match=r"f\.npy.*not a token dtype"):
        HttpDataProvider([f"{http_host.base_url}/f.npy"], L, **FAST)
