"""The server's read-only status endpoint: ``GET /status`` on its own port, JSON, no login.

It is what the run explorer's indexer (:mod:`psyche.explorer`) follows: the latest published
coordinator state (the serde JSON the clients get, byte for byte), who is connected, pending and
kicked, the recent hub events, and the last witness reports with their metadata (loss, tokens/s,
bandwidth, evals), which the coordinator itself never stores.

A reader must never slow the run, so:

* the answer is built at most once per ``min_interval`` and shared by every reader in between
  (the cost of a poll does not grow with the number of readers);
* at most ``max_readers`` requests are served at once; one more is closed at once;
* a request must arrive within ``timeout`` and is at most 4 KiB; the answer must be taken within
  ``timeout`` or the connection is dropped; every write is through asyncio, so a slow reader holds
  only its own task, never the tick or a client's connection;
* anything but ``GET /status`` (or ``/status?…``) gets a 404 or 405, and nothing here mutates
  the server.

``GET /status?since=N`` also lists, under ``"earlier"``, the states published after sequence
number ``N`` and before the one in the answer (at most the server's last 64), oldest first: a
round's phases can last less than a poll interval, and without them an indexer would see a round
that never reached its witness phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from psyche.backends.centralized.server import CentralizedServer
from psyche.coordinator.types import WitnessMetadata
from psyche.protocol.identity import NodeIdentity

__all__ = ["StatusEndpoint", "WitnessReports"]

log = logging.getLogger(__name__)

MAX_REQUEST = 4096


@dataclass(frozen=True, slots=True)
class WitnessReport:
    ref: str
    at: float
    client: str
    metadata: WitnessMetadata


class WitnessReports:
    """The last ``capacity`` accepted witnesses' metadata, each with a reference unique to this
    server process (``<boot>:<n>``) so a reader can tell what it already stored."""

    def __init__(self, capacity: int = 2048) -> None:
        self.boot = time.time_ns() // 1000
        self._n = 0
        self.reports: deque[WitnessReport] = deque(maxlen=capacity)

    def add(self, who: NodeIdentity, metadata: WitnessMetadata) -> None:
        self._n += 1
        self.reports.append(
            WitnessReport(f"{self.boot}:{self._n}", time.time(), who.hex(), metadata)
        )


def _report_obj(r: WitnessReport) -> dict[str, Any]:
    m = r.metadata
    return {
        "ref": r.ref,
        "at": r.at,
        "client": r.client,
        "step": m.step,
        "loss": m.loss,
        "tokens_per_sec": m.tokens_per_sec,
        "bandwidth_per_sec": m.bandwidth_per_sec,
        "efficiency": m.efficiency,
        "evals": [[e.task, e.value] for e in m.evals],
    }


def status_body(server: CentralizedServer, reports: WitnessReports | None) -> bytes:
    """The ``/status`` answer: the hub's published state JSON spliced in as is."""
    hub = server.hub
    seq, state = hub.snapshot()
    head = {
        "run_id": server.run_id,
        "seq": seq,
        "first_seq": hub.first_seq,
        "now": time.time(),
        "connected": [w.hex() for w in server.connections],
        "pending": [w.hex() for w in hub.pending],
        "kicked": [w.hex() for w in hub.kicked],
        "events": [{"at": e.at, "text": e.text} for e in hub.events],
        "stats": dict(server.stats),
        "witnesses": [] if reports is None else [_report_obj(r) for r in reports.reports],
    }
    text = json.dumps(head, allow_nan=False, default=str).encode()
    return text[:-1] + b',"coordinator":' + state + b"}"


def with_earlier(server: CentralizedServer, body: bytes, seq: int, since: int) -> bytes:
    """``body`` (whose state is number ``seq``) with the states published between ``since`` and
    ``seq`` spliced in as ``"earlier"``: pre-encoded JSON joined, so a poll stays cheap."""
    parts = [
        b'{"seq":' + str(n).encode() + b',"coordinator":' + t + b"}"
        for n, t in server.hub.states_between(since, seq)
    ]
    return body[:-1] + b',"earlier":[' + b",".join(parts) + b"]}"


def _since(query: bytes) -> int | None:
    for pair in query.split(b"&"):
        key, _, value = pair.partition(b"=")
        if key == b"since" and value.isdigit() and len(value) <= 20:
            return int(value)
    return None


class StatusEndpoint:
    """``GET /status`` for one :class:`CentralizedServer`; :meth:`start`, then :meth:`close`."""

    def __init__(
        self,
        server: CentralizedServer,
        reports: WitnessReports | None = None,
        *,
        max_readers: int = 16,
        min_interval: float = 0.5,
        timeout: float = 5.0,
    ) -> None:
        self.server = server
        self.reports = reports
        self.max_readers = max_readers
        self.min_interval = min_interval
        self.timeout = timeout
        self.port = 0
        self.served = 0
        self._readers = 0
        self._cached: tuple[float, int, bytes] | None = None
        self._listener: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self._listener = await asyncio.start_server(self._handle, host, port)
        self.port = self._listener.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._listener.wait_closed()

    def body(self, since: int | None = None) -> bytes:
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] >= self.min_interval:
            seq = self.server.hub.seq
            self._cached = (now, seq, status_body(self.server, self.reports))
        _, seq, body = self._cached
        return body if since is None else with_earlier(self.server, body, seq, since)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._readers >= self.max_readers:
            writer.close()
            return
        self._readers += 1
        try:
            async with asyncio.timeout(self.timeout):
                status, body = await self._answer(reader)
                head = (
                    f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                    "Connection: close\r\n\r\n"
                )
                writer.write(head.encode() + body)
                await writer.drain()
                self.served += 1
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._readers -= 1
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[str, bytes]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await reader.read(MAX_REQUEST)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_REQUEST:
                return "431 Request Header Fields Too Large", b'{"error":"request too large"}'
        method, _, rest = data.partition(b" ")
        path, _, query = rest.split(b" ", 1)[0].partition(b"?")
        if path != b"/status":
            return "404 Not Found", b'{"error":"only /status is served"}'
        if method != b"GET":
            return "405 Method Not Allowed", b'{"error":"read-only: GET /status"}'
        return "200 OK", self.body(_since(query))
