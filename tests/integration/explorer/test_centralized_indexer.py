"""The centralized half of the explorer with real parts: a CentralizedServer serving GET /status
on a socket, the indexer's source polling it into SQLite, and hostile readers and answers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.server import CentralizedServer, ServerOptions
from psyche.backends.centralized.status_http import StatusEndpoint, WitnessReports
from psyche.coordinator.types import EvalResult, WitnessMetadata
from psyche.explorer.centralized import CentralizedSource
from psyche.explorer.indexer import follow
from psyche.explorer.schema import metrics, open_engine, states
from psyche.explorer.sources import BadInput, SourceUnavailable
from psyche.explorer.store import Store
from psyche.protocol.identity import NodeIdentity

from ..support_explorer import count, make_coordinator

WHO = NodeIdentity.from_single_key(bytes([7]) * 32)


@contextlib.asynccontextmanager
async def status_server(**kw: float) -> AsyncIterator[tuple[CentralizedServer, StatusEndpoint]]:
    hub = RunHost(make_coordinator(), first_seq=1000)
    server = CentralizedServer(hub, ServerOptions(host="127.0.0.1", port=0, tick_interval=0.05))
    reports = WitnessReports()
    server.on_witness = reports.add
    endpoint = StatusEndpoint(server, reports, min_interval=0.0, **kw)
    await server.start()
    await endpoint.start("127.0.0.1", 0)
    try:
        yield server, endpoint
    finally:
        await endpoint.close()
        await server.close()


def test_states_and_witness_reports_are_stored_once(tmp_path: Path) -> None:
    async def go() -> None:
        store = Store(open_engine(str(tmp_path / "db.sqlite")))
        async with status_server() as (server, endpoint):
            src = CentralizedSource(store, f"http://127.0.0.1:{endpoint.port}")
            assert await src.poll() == 1
            assert await src.poll() == 0  # the same state again: nothing new
            meta = WitnessMetadata(
                step=3, loss=2.5, tokens_per_sec=100.0, evals=(EvalResult(0, 0.5),)
            )
            assert server.on_witness is not None
            server.on_witness(WHO, meta)
            server.hub.join(WHO)  # a pending client: the published state is the same
            server.hub.seq += 1  # … but a new sequence number stands for a new publication
            assert await src.poll() == 2
            assert await src.poll() == 0
            await src.close()
        run = store.runs(10)[0]
        assert (run["backend"], run["run_id"], run["phase"]) == (
            "centralized",
            "tiny",
            "WaitingForMembers",
        )
        detail = store.get_run(run["id"])
        assert detail is not None and detail["detail"]["clients"][0]["state"] == "Pending"
        # The server never dials its clients' addresses: reachability is not known there.
        assert detail["detail"]["clients"][0]["p2p"] == "n/a"
        steps = store.steps(run["id"], 10)
        assert [(s["step"], s["loss"], s["evals"]) for s in steps] == [(3, 2.5, {"0": 0.5})]
        assert count(store, states) == 2 and count(store, metrics) == 1

    asyncio.run(go())


def test_states_published_between_polls_are_all_stored(tmp_path: Path) -> None:
    """A round's phases can be shorter than the poll interval: ``?since=`` brings the states
    published in between, so the indexer stores every phase in order (a round seen only in
    RoundTrain and then in the next round would have no witness phase)."""
    from psyche.coordinator.types import RunState

    async def go() -> None:
        store = Store(open_engine(str(tmp_path / "db.sqlite")))
        async with status_server() as (server, endpoint):
            src = CentralizedSource(store, f"http://127.0.0.1:{endpoint.port}")
            assert await src.poll() == 1
            hub = server.hub
            c = hub.coordinator
            # Three publications with no await in between: no poll can see the first two.
            for phase in (RunState.Warmup, RunState.RoundTrain, RunState.RoundWitness):
                c.run_state = phase
                c.run_state_start_unix_timestamp += 1
                assert hub._commit()
            first = hub.seq - 2
            await src.poll()
            await src.close()
        with store.engine.connect() as conn:
            seen = conn.execute(select(states.c.seq, states.c.phase).order_by(states.c.seq)).all()
        phases = {seq: phase for seq, phase in seen}
        assert [phases.get(first + i) for i in range(3)] == ["Warmup", "RoundTrain", "RoundWitness"]
        assert len(seen) == len(phases)  # each state once

    asyncio.run(go())


def test_endpoint_refuses_what_is_not_a_get_of_status() -> None:
    async def exchange(port: int, request: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        await writer.drain()
        data = await reader.read()
        writer.close()
        return data

    async def go() -> None:
        async with status_server(timeout=0.5) as (server, endpoint):
            p = endpoint.port
            assert (await exchange(p, b"GET /status HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
            assert b"404" in (await exchange(p, b"GET /admin HTTP/1.1\r\n\r\n")).split(b"\r\n")[0]
            assert b"405" in (await exchange(p, b"POST /status HTTP/1.1\r\n\r\n")).split(b"\r\n")[0]
            big = b"GET /status HTTP/1.1\r\nX: " + b"a" * 10_000 + b"\r\n\r\n"
            assert b"431" in (await exchange(p, big)).split(b"\r\n")[0]
            # Idle readers fill the budget, are cut off after the timeout, and the tick loop
            # never waited for them.
            idle = [await asyncio.open_connection("127.0.0.1", p) for _ in range(20)]
            ticking = asyncio.create_task(server.serve_forever())
            seq0 = server.hub.seq
            t0 = asyncio.get_running_loop().time()
            await asyncio.sleep(0.8)
            assert asyncio.get_running_loop().time() - t0 < 1.5
            assert [await r.read() for r, _ in idle] == [b""] * len(idle)
            assert (await exchange(p, b"GET /status HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
            ticking.cancel()
            assert server.hub.seq >= seq0
            for _, w in idle:
                w.close()

    asyncio.run(go())


async def _serve_bytes(body: bytes) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4096)
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"seq": 1}', b'{"seq": 1, "coordinator": {"run_id": 5}}'],
)
def test_an_undecodable_status_is_bad_input(tmp_path: Path, body: bytes) -> None:
    async def go() -> None:
        server = await _serve_bytes(body)
        port = server.sockets[0].getsockname()[1]
        store = Store(open_engine(str(tmp_path / "db.sqlite")))
        src = CentralizedSource(store, f"http://127.0.0.1:{port}")
        with pytest.raises(BadInput):
            await src.poll()
        await src.close()
        server.close()

    asyncio.run(go())


def test_outage_is_logged_once_and_the_indexer_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        store = Store(open_engine(str(tmp_path / "db.sqlite")))
        async with status_server() as (_, endpoint):
            port = endpoint.port
            await endpoint.close()  # the server is "down"
            src = CentralizedSource(store, f"http://127.0.0.1:{port}", timeout=0.5)
            with pytest.raises(SourceUnavailable):
                await src.poll()
            stop = asyncio.Event()
            task = asyncio.create_task(follow(src, 0.05, stop=stop))
            await asyncio.sleep(0.6)
            assert count(store, states) == 0
            await endpoint.start("127.0.0.1", port)  # back
            for _ in range(100):
                if count(store, states):
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(task, 5)
            await src.close()
        assert count(store, states) == 1

    with caplog.at_level(logging.INFO, logger="psyche.explorer"):
        asyncio.run(go())
    unavailable = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(unavailable) == 1, [r.getMessage() for r in caplog.records]
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_count_helper_agrees_with_sql(tmp_path: Path) -> None:
    store = Store(open_engine(str(tmp_path / "db.sqlite")))
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(states)).scalar_one() == count(
            store, states
        )
