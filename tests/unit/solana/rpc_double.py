"""``SolanaRpcDouble``: a TEST DOUBLE of a Solana RPC node, because no validator can run here.

It speaks just enough of the real JSON-RPC (HTTP POST) and websocket (``accountSubscribe``) APIs
for the Solana backend and CLI: accounts are byte strings the test sets; ``sendTransaction``
decodes the transaction with solders, checks its signatures, records it and hands it to a
test-provided ``program`` callback that may change accounts (and so notify subscribers) or
reject it with a custom program error code, like a program would. Faults can be injected: fail
the next N HTTP requests, drop every websocket connection. Nothing here runs a program.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from solders.hash import Hash
from solders.pubkey import Pubkey
from solders.transaction import Transaction
from websockets.asyncio.server import ServerConnection, serve

Program = Callable[[Transaction], int | None]
"""Called for each valid transaction; returns a custom error code to reject it, else None."""


@dataclass
class SolanaRpcDouble:
    program: Program | None = None
    accounts: dict[str, bytes] = field(default_factory=dict)
    transactions: list[Transaction] = field(default_factory=list)
    rejected: list[Transaction] = field(default_factory=list)
    fail_next_http: int = 0
    requests: list[str] = field(default_factory=list)
    slot: int = 1
    http_port: int = 0
    ws_port: int = 0
    _subs: dict[ServerConnection, tuple[int, str]] = field(default_factory=dict)
    _servers: list[Any] = field(default_factory=list)
    _next_sub: int = 1
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}"

    async def start(self) -> SolanaRpcDouble:
        http = await asyncio.start_server(self._http_conn, "127.0.0.1", 0)
        self.http_port = http.sockets[0].getsockname()[1]
        ws = await serve(self._ws_conn, "127.0.0.1", 0)
        self.ws_port = next(iter(ws.sockets)).getsockname()[1]
        self._servers = [http, ws]
        return self

    async def stop(self) -> None:
        for s in self._servers:
            s.close()
        for w in list(self._writers):
            w.close()
        for conn in list(self._subs):
            with contextlib.suppress(Exception):
                await conn.close()
        for s in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.wait_closed(), 2)

    async def __aenter__(self) -> SolanaRpcDouble:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- test controls ---------------------------------------------------------------------------

    async def set_account(self, pubkey: Pubkey | str, data: bytes) -> None:
        key = str(pubkey)
        self.accounts[key] = bytes(data)
        self.slot += 1
        for conn, (sub, watched) in list(self._subs.items()):
            if watched == key:
                with contextlib.suppress(Exception):
                    await conn.send(json.dumps(self._notification(sub, data)))

    async def drop_websockets(self) -> None:
        for conn in list(self._subs):
            with contextlib.suppress(Exception):
                await conn.close()
        self._subs.clear()

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    # --- JSON-RPC --------------------------------------------------------------------------------

    def _account_value(self, data: bytes) -> dict[str, Any]:
        return {
            "data": [base64.b64encode(data).decode(), "base64"],
            "executable": False,
            "lamports": 1_000_000,
            "owner": "11111111111111111111111111111111",
            "rentEpoch": 0,
            "space": len(data),
        }

    def _notification(self, sub: int, data: bytes) -> dict[str, Any]:
        value = {"context": {"slot": self.slot}, "value": self._account_value(data)}
        return {
            "jsonrpc": "2.0",
            "method": "accountNotification",
            "params": {"result": value, "subscription": sub},
        }

    def handle(self, method: str, params: list[Any]) -> Any:
        self.requests.append(method)
        ctx = {"slot": self.slot}
        if method == "getAccountInfo":
            data = self.accounts.get(params[0])
            return {"context": ctx, "value": None if data is None else self._account_value(data)}
        if method == "getLatestBlockhash":
            bh = str(Hash.new_unique())
            return {"context": ctx, "value": {"blockhash": bh, "lastValidBlockHeight": 100}}
        if method == "getMinimumBalanceForRentExemption":
            return 890_880 + 6_960 * int(params[0])
        if method == "getSignatureStatuses":
            return {
                "context": ctx,
                "value": [{"confirmationStatus": "confirmed", "err": None} for _ in params[0]],
            }
        if method == "sendTransaction":
            tx = Transaction.from_bytes(base64.b64decode(params[0]))
            tx.verify()
            code = self.program(tx) if self.program is not None else None
            if code is not None:
                self.rejected.append(tx)
                err = {"InstructionError": [0, {"Custom": code}]}
                raise _RpcFailure(-32002, "Transaction simulation failed", {"err": err})
            self.transactions.append(tx)
            return str(tx.signatures[0])
        raise _RpcFailure(-32601, f"Method not found: {method}")

    async def _http_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                length = next(
                    int(x.split(":", 1)[1]) for x in lines if x.lower().startswith("content-length")
                )
                body = json.loads(await reader.readexactly(length))
                if self.fail_next_http > 0:
                    self.fail_next_http -= 1
                    status, reply = "503 Service Unavailable", {"error": "injected failure"}
                else:
                    status, reply = "200 OK", self._reply(body)
                data = json.dumps(reply).encode()
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            StopIteration,
            asyncio.CancelledError,
        ):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _reply(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            result = self.handle(body["method"], body.get("params", []))
            return {"jsonrpc": "2.0", "id": body["id"], "result": result}
        except _RpcFailure as e:
            err: dict[str, Any] = {"code": e.code, "message": e.message}
            if e.data is not None:
                err["data"] = e.data
            return {"jsonrpc": "2.0", "id": body["id"], "error": err}

    async def _ws_conn(self, conn: ServerConnection) -> None:
        try:
            async for raw in conn:
                req = json.loads(raw)
                if req.get("method") != "accountSubscribe":
                    await conn.send(
                        json.dumps({"jsonrpc": "2.0", "id": req.get("id"), "error": {}})
                    )
                    continue
                sub = self._next_sub
                self._next_sub += 1
                self._subs[conn] = (sub, req["params"][0])
                await conn.send(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": sub}))
        except Exception:
            pass
        finally:
            self._subs.pop(conn, None)


class _RpcFailure(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code, self.message, self.data = code, message, data
