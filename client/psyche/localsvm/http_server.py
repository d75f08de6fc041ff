"""A small HTTP/1.1 server for the JSON-RPC front, on asyncio streams (no web framework is
pinned in this project, and the protocol needed is tiny).

POST with a JSON body on any path → the JSON-RPC handler; ``GET /health`` → ``ok`` (a
validator serves both). Persistent connections, ``Expect: 100-continue``, a header limit, and a
body limit (a validator's is 50 KiB: a transaction is at most 1232 bytes). The handler is a plain
function called on the event loop's thread, so every chain access stays on that one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from http import HTTPStatus

__all__ = ["MAX_REQUEST_BODY_SIZE", "HttpServer"]

log = logging.getLogger(__name__)

MAX_REQUEST_BODY_SIZE = 50 * 1024
MAX_HEADER_SIZE = 16 * 1024
IDLE_TIMEOUT = 60.0
JSON = "application/json"
INTERNAL_ERROR_BODY = (
    b'{"jsonrpc":"2.0","error":{"code":-32603,"message":"Internal error"},"id":null}'
)

RequestHandler = Callable[[bytes], bytes | None]


class _Reject(Exception):
    def __init__(self, status: HTTPStatus, text: str = "") -> None:
        super().__init__(text)
        self.status = status
        self.text = text or status.phrase


class HttpServer:
    def __init__(
        self,
        handler: RequestHandler,
        *,
        health: Callable[[], str] = lambda: "ok",
        max_body: int = MAX_REQUEST_BODY_SIZE,
    ) -> None:
        self._handler = handler
        self._health = health
        self._max_body = max_body
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port (useful when ``port`` is 0)."""
        self._server = await asyncio.start_server(
            self._serve, host, port, limit=MAX_HEADER_SIZE, reuse_address=True
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            # Python 3.11's Server.close leaves accepted connections open.
            for task in list(self._connections):
                task.cancel()
            for task in list(self._connections):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection is to be closed."""
        try:
            async with asyncio.timeout(IDLE_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        except asyncio.LimitOverrunError:
            await self._send(writer, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"", False)
            return False
        try:
            method, target, version, headers = self._parse_head(head)
        except _Reject as e:
            await self._send(writer, e.status, e.text.encode(), False)
            return False
        connection = headers.get("connection", "").lower()
        keep_alive = (
            "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        )
        try:
            body = await self._read_body(method, target, headers, reader, writer)
        except _Reject as e:
            # The unread body would be taken for the next request: close after refusing.
            await self._send(writer, e.status, e.text.encode(), False)
            return False
        if body is None:
            health = self._health().encode()
            await self._send(writer, HTTPStatus.OK, health, keep_alive, "text/plain")
            return keep_alive
        try:
            reply = self._handler(body)
        except Exception:
            # The handler answers every malformed body itself; reaching this is a bug of ours,
            # whose traceback belongs in the log. The caller still gets a JSON-RPC error.
            log.exception("JSON-RPC handler failed")
            await self._send(
                writer, HTTPStatus.INTERNAL_SERVER_ERROR, INTERNAL_ERROR_BODY, False, JSON
            )
            return False
        await self._send(writer, HTTPStatus.OK, reply or b"", keep_alive, JSON)
        return keep_alive

    @staticmethod
    def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
        except ValueError:
            raise _Reject(HTTPStatus.BAD_REQUEST) from None
        if version not in ("HTTP/1.0", "HTTP/1.1"):
            raise _Reject(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise _Reject(HTTPStatus.BAD_REQUEST)
            headers[name.lower()] = value.strip()
        return method, target, version, headers

    async def _read_body(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bytes | None:
        """The JSON-RPC body, or None for a health check."""
        path = target.split("?", 1)[0]
        if method == "GET" and path == "/health":
            return None
        if method != "POST":
            raise _Reject(HTTPStatus.METHOD_NOT_ALLOWED, "Used HTTP Method is not allowed. POST")
        if "transfer-encoding" in headers:
            raise _Reject(HTTPStatus.LENGTH_REQUIRED)
        try:
            length = int(headers["content-length"])
        except KeyError:
            raise _Reject(HTTPStatus.LENGTH_REQUIRED) from None
        except ValueError:
            raise _Reject(HTTPStatus.BAD_REQUEST) from None
        if length < 0:
            raise _Reject(HTTPStatus.BAD_REQUEST)
        if length > self._max_body:
            raise _Reject(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            raise _Reject(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "Supplied content type is not allowed. Content-Type: application/json is required",
            )
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        async with asyncio.timeout(IDLE_TIMEOUT):
            return await reader.readexactly(length)

    @staticmethod
    async def _send(
        writer: asyncio.StreamWriter,
        status: HTTPStatus,
        body: bytes,
        keep_alive: bool,
        content_type: str = "text/plain",
    ) -> None:
        head = (
            f"HTTP/1.1 {status.value} {status.phrase}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
