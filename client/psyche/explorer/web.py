"""The explorer's web app: the page (one HTML file, plain JS, uPlot for charts, all served from
the package: nothing from the internet), the read-only JSON API under ``/api/`` and a
server-sent event stream that tells the page when to refresh.

Every API read is bounded: ``limit`` is 1‥1000 (default 200), ``offset`` ≤ 1,000,000, unknown or
malformed parameters are a 400, an unknown run a 404, a query string over 2 KiB a 414, and any
method but GET a 405. Nothing here writes to the database; serving a stored database's history
(no indexer), it is opened read-only besides (:mod:`psyche.explorer.readonly`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from psyche.explorer.store import MAX_LIMIT, Store

__all__ = ["API", "make_app"]

STATIC = Path(__file__).parent / "static"
MAX_QUERY = 2048
MAX_OFFSET = 1_000_000

API: dict[str, str] = {
    "/api/": "this index",
    "/api/explorer": "live (an indexer follows runs) or history (a stored database, read-only)",
    "/api/runs?limit&offset": "runs, latest update first",
    "/api/runs/{id}": "one run: phase, progress, latest state's detail (clients, checkpoint)",
    "/api/runs/{id}/steps?after&limit": "per trained step: mean loss, tokens/s, evals",
    "/api/runs/{id}/rounds?limit": "the last rounds: train/witness times, opportunistic",
    "/api/runs/{id}/states?limit": "the last states stored",
    "/api/runs/{id}/transactions?limit": "recent transactions (Solana), newest first",
    "/api/runs/{id}/checkpoints?limit": "checkpoints seen",
    "/api/pools?limit": "Mining Pools: cap, deposited, extracted, redeemable, lenders",
    "/api/treasurers?limit": "Treasurer Run accounts",
    "/api/events": "server-sent events: one 'change' event whenever something is stored",
}


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.lstrip("-").isdigit() or len(raw) > 20:
        raise BadRequest(400, f"{name} must be an integer")
    value = int(raw)
    if not lo <= value <= hi:
        raise BadRequest(400, f"{name} must be in {lo}..{hi}")
    return value


def _check(request: Request, allowed: set[str]) -> None:
    if len(request.url.query) > MAX_QUERY:
        raise BadRequest(414, "query string too long")
    unknown = set(request.query_params.keys()) - allowed
    if unknown:
        raise BadRequest(400, f"unknown parameter {sorted(unknown)[0]!r}")


def _limit(request: Request) -> int:
    return _int(request, "limit", 200, 1, MAX_LIMIT)


def _endpoint(allowed: set[str], fn: Callable[[Request], Any]) -> Callable[[Request], Response]:
    """A JSON endpoint taking the query parameters ``allowed``; a :class:`BadRequest` becomes its
    status and message.

    Sync on purpose: Starlette runs it in its thread pool, so a database read never blocks the
    event loop (the indexer runs on it)."""

    def call(request: Request) -> Response:
        try:
            _check(request, allowed)
            return JSONResponse(fn(request))
        except BadRequest as e:
            return JSONResponse({"error": str(e)}, status_code=e.status)

    return call


def _run_routes(store: Store) -> list[Route]:
    """``/api/runs`` and one run's reads."""

    def existing_run(request: Request) -> tuple[int, Any]:
        """The run the path names and its row; 404 for a malformed or unknown id."""
        raw = request.path_params["run"]
        found = store.get_run(int(raw)) if raw.isdigit() and len(raw) <= 12 else None
        if found is None:
            raise BadRequest(404, "no such run")
        return int(raw), found

    def per_run(read: Callable[[int, int], Any]) -> Callable[[Request], Any]:
        return lambda request: read(existing_run(request)[0], _limit(request))

    def steps(request: Request) -> Any:
        run, _ = existing_run(request)
        after = _int(request, "after", -1, -1, 2**32)
        return store.steps(run, _limit(request), after)

    def runs(request: Request) -> Any:
        return store.runs(_limit(request), _int(request, "offset", 0, 0, MAX_OFFSET))

    lim = {"limit"}
    return [
        Route("/api/runs", _endpoint({"limit", "offset"}, runs)),
        Route("/api/runs/{run}", _endpoint(set(), lambda r: existing_run(r)[1])),
        Route("/api/runs/{run}/steps", _endpoint({"limit", "after"}, steps)),
        Route("/api/runs/{run}/rounds", _endpoint(lim, per_run(store.rounds))),
        Route("/api/runs/{run}/states", _endpoint(lim, per_run(store.states))),
        Route("/api/runs/{run}/transactions", _endpoint(lim, per_run(store.transactions))),
        Route("/api/runs/{run}/checkpoints", _endpoint(lim, per_run(store.checkpoints))),
    ]


def _events(store: Store, poll: float) -> Callable[[Request], Awaitable[Response]]:
    """``/api/events``: a ``change`` event whenever the database's version moves."""

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[bytes]:
            last: Any = None
            yield b"retry: 2000\n\n"
            while not await request.is_disconnected():
                version = await asyncio.to_thread(store.version)
                if version != last:
                    last = version
                    yield f"event: change\ndata: {version[0]}\n\n".encode()
                else:
                    yield b": keepalive\n\n"
                await asyncio.sleep(poll)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    return events


def _index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    return JSONResponse({"error": getattr(exc, "detail", "not found")}, status_code=status)


def make_app(store: Store, *, poll: float = 1.0, live: bool = True) -> Starlette:
    """The page and the API over ``store``. ``live``: an indexer is following runs into it;
    ``False`` when serving a stored database's history (``/api/explorer`` says which, and the
    page shows it)."""
    lim = {"limit"}
    explorer = {"live": live, "read_only": not live}
    routes = [
        Route("/", _index),
        Route("/api/", _endpoint(set(), lambda r: {"endpoints": API})),
        Route("/api/explorer", _endpoint(set(), lambda r: explorer)),
        *_run_routes(store),
        Route("/api/pools", _endpoint(lim, lambda r: store.accounts("pool", _limit(r)))),
        Route("/api/treasurers", _endpoint(lim, lambda r: store.accounts("treasurer", _limit(r)))),
        Route("/api/events", _events(store, poll)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found})
