"""``HttpDataProvider``: token files fetched with HTTP range requests.

Every client of a run builds the same file list and the same sample index (see
:mod:`psyche.data.provider`), then downloads only the byte ranges of its own samples.

File list, in this order (the order defines the sample ids, so it must be identical everywhere):

* ``SingleUrl(url)``: one file.
* ``NumberedFiles``: ``url_template.replace("{}", str(start_index + i).zfill(n_left_pad_zeros))``
  for ``i < num_files``, in index order. The template must contain ``{}`` exactly once.
* an explicit URL list (the constructor): the given order.
* ``Gcp(bucket, prefix)``: the anonymous JSON listing ``GET {base}/storage/v1/b/{bucket}/o
  ?prefix=…&pageToken=…`` (all pages), keeping names with a data extension, **sorted by object
  name**; each file is read from ``{base}/{bucket}/{name}`` (the public-object URL). ``base`` is
  ``https://storage.googleapis.com`` unless overridden (tests point it at a local server).

Sizes come from ``HEAD`` (``Content-Length``), or from the listing's ``size`` for buckets, which
saves one request per object. ``.npy`` files are probed with one small range request to parse
their header. Reads use ``Range: bytes=a-b``; runs of sequences that are contiguous in one file
are fetched with one request, several runs in parallel (``max_concurrency``). A response must be
200 or 206 with exactly ``b - a + 1`` bytes. Network errors, 5xx/429 and short bodies are retried
``retries`` times with exponential backoff; other statuses fail at once with :class:`DataError`.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import numpy as np
import torch

from psyche.data.provider import DataError, SampleIndex, tokens_to_tensor
from psyche.data.tokenfiles import (
    NPY_PROBE_BYTES,
    TokenLayout,
    has_data_extension,
    layout_from_head,
    npy_header_end,
)
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import (
    DontShuffle,
    Gcp,
    HttpLocation,
    NumberedFiles,
    Shuffle,
    SingleUrl,
    TokenSize,
)

__all__ = ["GCS_BASE_URL", "HttpDataProvider", "list_gcs_bucket", "numbered_file_urls"]

log = logging.getLogger(__name__)
T = TypeVar("T")

GCS_BASE_URL = "https://storage.googleapis.com"
_MAX_LISTING_PAGES = 100_000


def numbered_file_urls(template: str, start_index: int, pad: int, num_files: int) -> list[str]:
    if template.count("{}") != 1:
        raise DataError(f"url template {template!r} must contain '{{}}' exactly once")
    return [template.replace("{}", str(start_index + i).zfill(pad)) for i in range(num_files)]


@dataclass(frozen=True, slots=True)
class _RemoteFile:
    url: str
    name: str
    """URL path, for the extension check."""
    size: int | None


@dataclass(frozen=True, slots=True)
class _Probed:
    file: _RemoteFile
    layout: TokenLayout


class _Http:
    """One httpx client plus the retry policy; counts requests so tests can check coalescing."""

    def __init__(self, client: httpx.Client, retries: int, backoff: float) -> None:
        self.client = client
        self.retries = retries
        self.backoff = backoff
        self.requests: dict[str, int] = {"HEAD": 0, "GET": 0}
        self._lock = threading.Lock()

    def call(self, method: str, url: str, check: Callable[[httpx.Response], T], **kw: Any) -> T:
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            with self._lock:
                self.requests[method] = self.requests.get(method, 0) + 1
            try:
                resp = self.client.request(method, url, **kw)
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if resp.status_code >= 500 or resp.status_code == 429:
                last = f"HTTP {resp.status_code}"
                continue
            if resp.status_code not in (200, 206):
                raise DataError(f"{method} {url}: HTTP {resp.status_code}")
            try:
                return check(resp)
            except _Retryable as e:
                last = str(e)
        raise DataError(f"{method} {url}: failed after {self.retries + 1} attempts ({last})")

    def size(self, url: str) -> int:
        def check(resp: httpx.Response) -> int:
            length = resp.headers.get("content-length", "")
            if not length.isdigit():
                raise DataError(f"HEAD {url}: no Content-Length in the response")
            return int(length)

        return self.call("HEAD", url, check)

    def range(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``start..end`` (inclusive) of ``url``; exactly that many or an error."""
        want = end - start + 1

        def check(resp: httpx.Response) -> bytes:
            if len(resp.content) != want:
                raise _Retryable(f"expected {want} bytes, got {len(resp.content)}")
            return resp.content

        return self.call("GET", url, check, headers={"Range": f"bytes={start}-{end}"})


class _Retryable(Exception):
    pass


def list_gcs_bucket(
    http: httpx.Client,
    bucket: str,
    prefix: str = "",
    *,
    base_url: str = GCS_BASE_URL,
    retries: int = 3,
    backoff: float = 0.5,
) -> list[tuple[str, int | None]]:
    """``(object name, size)`` of every object under ``prefix``, all pages, unsorted."""
    endpoint = f"{base_url.rstrip('/')}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o"
    out: list[tuple[str, int | None]] = []
    token: str | None = None
    seen: set[str] = set()
    wrapped = _Http(http, retries, backoff)
    for _ in range(_MAX_LISTING_PAGES):
        params = {"prefix": prefix} if prefix else {}
        if token:
            params["pageToken"] = token
        doc = wrapped.call("GET", endpoint, lambda r: r.json(), params=params)
        if not isinstance(doc, dict):
            raise DataError(f"{endpoint}: listing is not a JSON object")
        for item in doc.get("items", []):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                raise DataError(f"{endpoint}: listing item without a string name: {item!r:.80}")
            size = item.get("size")
            out.append((name, int(size) if isinstance(size, str) and size.isdigit() else None))
        token = doc.get("nextPageToken")
        if not token:
            return out
        if not isinstance(token, str) or token in seen:
            raise DataError(f"{endpoint}: bad or repeated nextPageToken {token!r:.80}")
        seen.add(token)
    raise DataError(f"{endpoint}: more than {_MAX_LISTING_PAGES} listing pages")


class HttpDataProvider:
    """Samples of ``seq_len`` tokens from token files on HTTP servers (see module docstring)."""

    def __init__(
        self,
        urls: Sequence[str],
        seq_len: int,
        token_size: TokenSize = TokenSize.TwoBytes,
        shuffle: Shuffle | None = None,
        *,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_concurrency: int = 8,
        sizes: Sequence[int | None] | None = None,
    ) -> None:
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        if sizes is not None and len(sizes) != len(urls):
            raise ValueError("sizes must have one entry per URL")
        known = list(sizes) if sizes is not None else [None] * len(urls)
        files = [
            _RemoteFile(u, urllib.parse.urlsplit(u).path, s)
            for u, s in zip(urls, known, strict=True)
        ]
        if not files:
            raise DataError("no data files to read (empty URL list or bucket listing)")
        self._seq_len = seq_len
        client = httpx.Client(timeout=timeout, follow_redirects=True)
        self._http = _Http(client, retries, backoff)
        self._pool = ThreadPoolExecutor(max(1, max_concurrency), thread_name_prefix="http-data")
        try:
            probed = list(self._pool.map(lambda f: self._probe(f, token_size), files))
        except BaseException:
            self.close()
            raise
        self.urls = [p.file.url for p in probed]
        self._layouts = [p.layout for p in probed]
        self._index = SampleIndex(
            [lay.sequences(seq_len) for lay in self._layouts],
            shuffle if shuffle is not None else DontShuffle(),
        )

    @classmethod
    def from_location(
        cls,
        location: HttpLocation,
        seq_len: int,
        token_size: TokenSize,
        shuffle: Shuffle,
        *,
        gcs_base_url: str = GCS_BASE_URL,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_concurrency: int = 8,
    ) -> HttpDataProvider:
        kw: dict[str, Any] = {
            "timeout": timeout,
            "retries": retries,
            "backoff": backoff,
            "max_concurrency": max_concurrency,
        }
        if isinstance(location, SingleUrl):
            return cls([location.url], seq_len, token_size, shuffle, **kw)
        if isinstance(location, NumberedFiles):
            urls = numbered_file_urls(
                location.url_template,
                location.start_index,
                location.n_left_pad_zeros,
                location.num_files,
            )
            return cls(urls, seq_len, token_size, shuffle, **kw)
        if isinstance(location, Gcp):
            base = gcs_base_url.rstrip("/")
            with httpx.Client(timeout=timeout) as client:
                listing = list_gcs_bucket(
                    client,
                    location.bucket_name,
                    location.filter_directory,
                    base_url=base,
                    retries=retries,
                    backoff=backoff,
                )
            bucket = urllib.parse.quote(location.bucket_name, safe="")
            kept = [(n, s) for n, s in sorted(listing, key=lambda e: e[0]) if has_data_extension(n)]
            urls = [f"{base}/{bucket}/{urllib.parse.quote(n)}" for n, _ in kept]
            sizes = [s for _, s in kept]
            return cls(urls, seq_len, token_size, shuffle, sizes=sizes, **kw)
        raise DataError(f"unsupported HTTP location {location!r}")

    def _probe(self, file: _RemoteFile, token_size: TokenSize) -> _Probed:
        size = file.size if file.size is not None else self._http.size(file.url)
        head = b""
        if file.name.lower().endswith(".npy") and size > 0:
            head = self._http.range(file.url, 0, min(size, NPY_PROBE_BYTES) - 1)
            end = npy_header_end(head, file.url)
            if end is not None and len(head) < end <= size:
                head += self._http.range(file.url, len(head), end - 1)
        return _Probed(file, layout_from_head(file.url, head, size, token_size))

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def num_samples(self) -> int:
        return self._index.num_samples

    @property
    def request_counts(self) -> dict[str, int]:
        """HTTP requests made so far by method (including retries)."""
        return dict(self._http.requests)

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        L = self._seq_len
        out = np.empty((batch_id.size, L), dtype=np.int64)

        def fetch(run: tuple[int, int, int, int]) -> None:
            f, seq, count, row = run
            lay = self._layouts[f]
            start = lay.data_offset + seq * L * lay.itemsize
            data = self._http.range(self.urls[f], start, start + count * L * lay.itemsize - 1)
            out[row : row + count] = np.frombuffer(data, dtype=lay.dtype).reshape(count, L)

        for _ in self._pool.map(fetch, self._index.runs(batch_id)):
            pass
        return tokens_to_tensor(out, L)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.client.close()

    def __enter__(self) -> HttpDataProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
