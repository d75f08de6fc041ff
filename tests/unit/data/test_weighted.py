"""WeightedHttp: a weighted mix of HTTP datasets from a JSON file, served by local HTTP servers;
every client maps a batch id to the same samples, in the configured proportions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from psyche.data.factory import provider_for_location
from psyche.data.provider import DataError
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import WeightedHttpData

from .conftest import FakeHost

L = 8


def _http(url: str) -> dict[str, object]:
    return {"location": {"SingleUrl": url}, "token_size_in_bytes": "FourBytes",
            "shuffle": "DontShuffle"}  # fmt: skip


def _serve(host: FakeHost, weights: list[float] | None) -> str:
    # Dataset k holds 50 samples whose tokens are all 1000 * (k + 1) + row.
    locs = []
    for k in range(2):
        rows = [np.full(L, 1000 * (k + 1) + r, dtype="<u4") for r in range(50)]
        host.files[f"/d{k}.bin"] = np.concatenate(rows).tobytes()
        locs.append(_http(f"{host.base_url}/d{k}.bin"))
    if weights is None:
        doc = {"providers": {"LengthWeighted": locs}}
    else:
        doc = {
            "providers": {
                "ExplicitlyWeighted": [[loc, w] for loc, w in zip(locs, weights, strict=True)]
            }
        }
    host.files["/mix.json"] = json.dumps(doc).encode()
    return f"{host.base_url}/mix.json"


def test_weights_are_honoured_and_every_client_gets_the_same_samples(http_host: FakeHost) -> None:
    url = _serve(http_host, [3.0, 1.0])
    a = provider_for_location(WeightedHttpData(url), L)
    b = provider_for_location(WeightedHttpData(url), L)  # a second client
    got = a.get_samples(BatchId(0, 199)).numpy()
    assert np.array_equal(got, b.get_samples(BatchId(0, 199)).numpy())
    assert np.array_equal(a.get_samples(BatchId(17, 17)).numpy(), got[17:18])
    datasets = got[:, 0] // 1000 - 1
    share = float(np.mean(datasets == 0))
    assert 0.65 < share < 0.85, share  # 3:1 → 0.75
    # Inside a dataset, sample id i reads the dataset's sample i (mod its length).
    for i in range(200):
        assert got[i, 0] % 1000 == i % 50


def test_a_zero_weight_dataset_is_never_read(http_host: FakeHost) -> None:
    url = _serve(http_host, [0.0, 1.0])
    p = provider_for_location(WeightedHttpData(url), L)
    assert set(p.get_samples(BatchId(0, 99)).numpy()[:, 0] // 1000) == {2}


def test_length_weighted_mixes_both(http_host: FakeHost) -> None:
    url = _serve(http_host, None)
    p = provider_for_location(WeightedHttpData(url), L)
    assert set(p.get_samples(BatchId(0, 99)).numpy()[:, 0] // 1000) == {1, 2}


@pytest.mark.parametrize("body", [b"not json", b"{}", b'{"providers": {"ExplicitlyWeighted": []}}'])
def test_a_bad_providers_file_is_one_data_error(http_host: FakeHost, body: bytes) -> None:
    http_host.files["/mix.json"] = body
    with pytest.raises(DataError, match=r"mix\.json"):
        provider_for_location(WeightedHttpData(f"{http_host.base_url}/mix.json"), L)
