"""Build the ``DataProvider`` a run config's ``data_location`` names.

* ``Local(path)``: ``path`` is a token-file directory or a ``data.toml``. When the directory has a
  ``data.toml`` (as ``psyche data prepare`` writes), its ``dir``, ``token_size`` and
  ``shuffle_seed`` are used (the shuffle is then ``Seeded``); otherwise tokens are u16 and
  unshuffled. The model's ``max_seq_len`` always wins over the file's ``seq_len``: a local corpus
  can be cut at any length, and every client reads the same files.
* ``Http``: :class:`HttpDataProvider` (``gcs_base_url`` is for tests).
* ``Server(address)``: :class:`TcpDataProvider`, authenticated with ``secret_key`` (the client's
  P2P key); the server's ``seq_len`` must equal ours.
* ``Dummy``: all-zero samples.
* ``WeightedHttp(url)``: :class:`~psyche.data.weighted.WeightedHttpProvider` (a weighted mix of
  ``Http`` datasets described by the JSON file at ``url``).
* ``Preprocessed(path)``: :class:`~psyche.data.preprocessed.PreprocessedDataProvider` (the
  ``inputs`` rows of a local Parquet file or directory of them).
"""

from __future__ import annotations

from pathlib import Path

from psyche.data.http import GCS_BASE_URL, HttpDataProvider
from psyche.data.local import LocalDataProvider
from psyche.data.prepare import DATA_TOML
from psyche.data.preprocessed import PreprocessedDataProvider
from psyche.data.provider import DataError, DataProvider, DummyDataProvider
from psyche.data.tcp_client import TcpDataProvider
from psyche.data.weighted import WeightedHttpProvider
from psyche.protocol.identity import SecretKey
from psyche.protocol.locations import (
    DataLocation,
    DontShuffle,
    DummyData,
    HttpData,
    LocalData,
    PreprocessedData,
    SeededShuffle,
    ServerData,
    TokenSize,
    WeightedHttpData,
)
from psyche.protocol.run_file import load_data_config

__all__ = ["local_provider_from_path", "provider_for_location"]


def local_provider_from_path(path: str | Path, seq_len: int) -> LocalDataProvider:
    p = Path(path)
    toml = p if p.is_file() else p / DATA_TOML
    if toml.is_file():
        dc = load_data_config(toml)
        shuffle = SeededShuffle(dc.shuffle_seed)
        return LocalDataProvider(dc.resolved_dir(toml), seq_len, dc.token_size, shuffle)
    return LocalDataProvider(p, seq_len, TokenSize.TwoBytes, DontShuffle())


def provider_for_location(
    location: DataLocation,
    seq_len: int,
    *,
    secret_key: SecretKey | None = None,
    gcs_base_url: str = GCS_BASE_URL,
) -> DataProvider:
    if isinstance(location, LocalData):
        return local_provider_from_path(location.path, seq_len)
    if isinstance(location, HttpData):
        return HttpDataProvider.from_location(
            location.location,
            seq_len,
            location.token_size_in_bytes,
            location.shuffle,
            gcs_base_url=gcs_base_url,
        )
    if isinstance(location, WeightedHttpData):
        return WeightedHttpProvider.from_url(location.url, seq_len, gcs_base_url=gcs_base_url)
    if isinstance(location, PreprocessedData):
        return PreprocessedDataProvider(location.path, seq_len)
    if isinstance(location, ServerData):
        if secret_key is None:
            raise DataError("a Server data location needs the client's secret key")
        return TcpDataProvider(location.address, secret_key, seq_len)
    if isinstance(location, DummyData):
        return DummyDataProvider(seq_len)
    raise DataError(f"data location {type(location).TAG} is not supported by this client")
