"""Fixtures for the data tests: token-file writers and a real HTTP server on 127.0.0.1.

The HTTP server stands in for a file host and for the public GCS JSON API: it serves HEAD,
ranged GET and a paginated bucket listing from an in-memory dict, records every request, and can
be told to misbehave (short bodies, 5xx) per path.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class FakeHost:
    files: dict[str, bytes] = field(default_factory=dict)
    """URL path → content."""
    buckets: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    """bucket → listing items (name, size); served in pages of ``page_size``."""
    page_size: int = 2
    short: set[str] = field(default_factory=set)
    """Paths whose ranged GETs return one byte too few."""
    fail_once: set[str] = field(default_factory=set)
    """Paths whose next GET answers 503 (then the path is removed)."""
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    base_url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def gets(self, prefix: str = "/") -> list[tuple[str, str | None]]:
        return [(p, r) for m, p, r in self.log if m == "GET" and p.startswith(prefix)]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/octet-stream") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        host = self.server.host
        path = urllib.parse.urlsplit(self.path).path
        with host.lock:
            host.log.append(("HEAD", path, None))
        body = host.files.get(path)
        if body is None:
            self._send(404, b"")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()

    def do_GET(self) -> None:
        host = self.server.host
        url = urllib.parse.urlsplit(self.path)
        rng = self.headers.get("Range")
        with host.lock:
            host.log.append(("GET", url.path, rng))
            if url.path in host.fail_once:
                host.fail_once.discard(url.path)
                self._send(503, b"try later")
                return
        if url.path.startswith("/storage/v1/b/"):
            self._listing(url)
            return
        body = host.files.get(url.path)
        if body is None:
            self._send(404, b"")
            return
        if rng is None:
            self._send(200, body)
            return
        a, b = (int(x) for x in rng.removeprefix("bytes=").split("-"))
        part = body[a : b + 1]
        if url.path in host.short:
            part = part[:-1]
        self._send(206, part)

    def _listing(self, url: urllib.parse.SplitResult) -> None:
        host = self.server.host
        bucket = urllib.parse.unquote(url.path.split("/")[4])
        query = urllib.parse.parse_qs(url.query)
        prefix = query.get("prefix", [""])[0]
        start = int(query.get("pageToken", ["0"])[0])
        items = [i for i in host.buckets.get(bucket, []) if i["name"].startswith(prefix)]
        page = items[start : start + host.page_size]
        doc: dict[str, object] = {"kind": "storage#objects", "items": page}
        if start + host.page_size < len(items):
            doc["nextPageToken"] = str(start + host.page_size)
        self._send(200, json.dumps(doc).encode(), "application/json")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    host: FakeHost


@pytest.fixture
def http_host() -> Iterator[FakeHost]:
    server = _Server(("127.0.0.1", 0), _Handler)
    host = FakeHost()
    server.host = host
    host.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
