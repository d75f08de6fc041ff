"""A public RPC's rate limit on loopback: a JSON-RPC endpoint that answers HTTP 429 (with
``Retry-After``) to the calls it is told to refuse and answers the rest, as a public endpoint
under load does. The limit is the internet's; what the client makes of it is what is tested."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LimitingServer(ThreadingHTTPServer):
    """Refuses call ``n`` (counted from 1) when ``refuses(n)``; answers the others' bodies with
    ``answer(body)``."""

    def __init__(
        self,
        refuses: Callable[[int], bool],
        answer: Callable[[bytes], bytes],
        retry_after: str | None = "0.2",
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.refuses = refuses
        self.answer = answer
        self.retry_after = retry_after
        self.calls = 0
        self.limited = 0
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def admit(self) -> bool:
        """Counts a call; whether it is answered (not refused)."""
        with self._lock:
            self.calls += 1
            refuse = self.refuses(self.calls)
            self.limited += refuse
        return not refuse


class _Handler(BaseHTTPRequestHandler):
    server: LimitingServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if not self.server.admit():
            self.send_response(429)
            if self.server.retry_after is not None:
                self.send_header("Retry-After", self.server.retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        out = self.server.answer(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(server: LimitingServer) -> Iterator[LimitingServer]:
    """``server`` answering on a thread of its own until the block ends."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
