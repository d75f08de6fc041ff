"""Assembling and running the centralized server (``psyche-centralized-server run``).

:func:`build` turns the operator's files into a ready :class:`CentralizedServer`: the coordinator
from ``state.toml`` (with the progress of the newest saved state when ``--save-state-dir`` has one),
the :class:`RunHost` with its options, and, when the run's data location is ``Server(addr)``, the
TCP data server of :mod:`psyche.data.tcp_server` on ``addr``'s port with a ``RoundAuthorizer`` that
follows every published state. :func:`serve` runs it until SIGINT/SIGTERM. Configuration problems
raise :class:`~psyche.protocol.strict_obj.ConfigError` (or ``DataError``) before anything listens.

Unlike the reference, the server does not pre-download Hub/GCS checkpoints: it never loads a
model, and the clients fetch the checkpoint themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.server import CentralizedServer, ServerOptions
from psyche.backends.centralized.state_store import StateStore, progress_summary, restore_progress
from psyche.backends.centralized.status import render_status
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import ClientState, CoordinatorException, Progress, RunState
from psyche.coordinator.verification import VERIFIERS_PER_ROUND
from psyche.data.tcp_server import DataServer, RoundAuthorizer
from psyche.events import EventLog, state_event
from psyche.protocol.data_selection import BatchId, assign_data_for_state
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import SeededShuffle, ServerData
from psyche.protocol.model import LLM
from psyche.protocol.run_file import load_data_config, load_run_config
from psyche.protocol.strict_obj import U16, U32, U64, ConfigError, from_obj

__all__ = [
    "Built",
    "ServerSettings",
    "build",
    "data_authorization",
    "load_coordinator",
    "serve",
    "verifier_grants",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """What ``run`` was asked to do (one field per CLI flag)."""

    state: Path
    host: str = "0.0.0.0"
    port: int = 20000
    data_config: Path | None = None
    save_state_dir: Path | None = None
    init_warmup_time: int | None = None
    withdraw_on_disconnect: bool = True
    tui: bool = False
    events_file: Path | None = None
    """JSON-lines file receiving one line per published state (phase, step, witnesses, clients);
    the local testnet builds its round summary from it."""
    status_port: int | None = None
    """Serve the read-only ``GET /status`` endpoint (:mod:`.status_http`) on this port (0: a free
    one) for the run explorer; None: no endpoint."""


@dataclass(slots=True)
class Built:
    server: CentralizedServer
    data_server: DataServer | None
    data_port: int | None


def _progress(obj: Any) -> Progress:
    if not isinstance(obj, dict):
        raise ConfigError("progress: expected a table")
    unknown = set(obj) - {"epoch", "step", "epoch_start_data_index"}
    if unknown:
        raise ConfigError(f"progress.{sorted(unknown)[0]}: unknown key")
    return Progress(
        epoch=from_obj(U16, obj.get("epoch", 0), "progress.epoch"),
        step=from_obj(U32, obj.get("step", 1), "progress.step"),
        epoch_start_data_index=from_obj(
            U64, obj.get("epoch_start_data_index", 0), "progress.epoch_start_data_index"
        ),
    )


def load_coordinator(state: Path) -> Coordinator:
    """The coordinator a ``state.toml`` describes, in WaitingForMembers."""
    rc = load_run_config(state, require_run_id=True)
    for w in (*rc.warnings, *rc.advisories()):
        log.warning("%s: %s", state, w)
    if "epoch_state" in rc.extra:
        log.warning("%s: [epoch_state] is ignored; a run starts with no epoch clients", state)
    assert rc.run_id is not None
    return Coordinator(
        run_id=rc.run_id,
        config=rc.config,
        model=rc.model,
        run_state=RunState.WaitingForMembers,
        progress=_progress(rc.extra["progress"]) if "progress" in rc.extra else Progress(),
    )


def data_authorization(c: Coordinator) -> tuple[list[bytes], dict[BatchId, bytes]]:
    """Who may fetch data now (healthy epoch clients' P2P keys) and which intervals each may
    fetch: its assignments in the current and the previous round (a slow trainer may still be
    fetching the previous round's batch)."""
    es = c.epoch_state
    keys = [x.id.p2p_identity for x in es.clients if x.state is ClientState.Healthy]
    if c.run_state not in (RunState.RoundTrain, RunState.RoundWitness, RunState.Cooldown):
        return keys, {}
    rounds: list[tuple[Any, list[NodeIdentity]]] = []
    cur = c.current_round()
    if c.run_state is not RunState.Cooldown:
        rounds.append((cur, [x.id for x in es.clients]))
    prev = c.previous_round()
    if prev is not None:
        rounds.append((prev, c.previous_round_clients()))
    assigned: dict[BatchId, bytes] = {}
    # Previous round first: a retried interval (Round.retries) can be in both rounds, and the
    # current round's trainer is the one that fetches it now.
    for rnd, clients in reversed(rounds):
        if len(clients) != rnd.clients_len:
            continue
        try:
            sel = c.committee_selection(rnd)
            batch = c.batch_size_for_round(rnd)
            got = assign_data_for_state(
                clients, sel, rnd.data_index, batch, rnd.random_seed, rnd.retries
            )
        except (ValueError, CoordinatorException) as e:
            log.debug("no data assignment for round %d: %s", rnd.height, e)
            continue
        assigned.update({b: who.p2p_identity for b, who in got.items()})
    return keys, assigned


def verifier_grants(c: Coordinator) -> dict[bytes, list[BatchId]]:
    """The intervals the verifiers of the current round may fetch besides their own: the batches
    of the previous round's results the current round samples, which they recompute
    (docs/protocol.md, "Threat model and result verification"). Empty when nothing is sampled."""
    prev = c.previous_round()
    if prev is None or c.run_state not in (RunState.RoundTrain, RunState.RoundWitness):
        return {}
    cur = c.current_round()
    try:
        sampled = c.judged_sample(cur, prev)
        judged = c.previous_round_clients()
        if not sampled or len(judged) != prev.clients_len:
            return {}
        sel, psel = c.committee_selection(cur), c.committee_selection(prev)
        batch = c.batch_size_for_round(prev)
        got = assign_data_for_state(
            judged, psel, prev.data_index, batch, prev.random_seed, prev.retries
        )
    except (ValueError, CoordinatorException) as e:
        log.debug("no verifier data for round %d: %s", cur.height, e)
        return {}
    wanted = {judged[i] for i in sampled if i < len(judged)}
    batches = [b for b, who in got.items() if who in wanted]
    out: dict[bytes, list[BatchId]] = {}
    for i, x in enumerate(c.epoch_state.clients):
        proof = sel.get_witness(i)
        if proof.witness and proof.position < VERIFIERS_PER_ROUND:
            out[x.id.p2p_identity] = batches
    return out


def build(settings: ServerSettings) -> Built:
    """Everything ``run`` starts, configured and validated but not yet listening."""
    coordinator = load_coordinator(settings.state)
    store = None
    if settings.save_state_dir is not None:
        store = StateStore(settings.save_state_dir, coordinator.run_id)
        found = store.load_newest()
        if found is not None:
            saved, path = found
            coordinator = restore_progress(coordinator, saved)
            log.info("restored %s from %s", progress_summary(coordinator.progress), path)
            if coordinator.run_state is not RunState.WaitingForMembers:
                log.warning("restored run is %s: no epoch will start", coordinator.run_state.name)
    coordinator.run_state_start_unix_timestamp = int(time.time())

    def save(c: Coordinator) -> None:
        assert store is not None
        path = store.save(c)
        hub.note(f"saved {path.name}")

    hub = RunHost(
        coordinator,
        withdraw_on_disconnect=settings.withdraw_on_disconnect,
        init_warmup_time=settings.init_warmup_time,
        on_epoch_end=save if store is not None else None,
        first_seq=time.time_ns() // 1000,
    )
    data_server, data_port, follow = _data_server(coordinator, settings)
    events = EventLog(settings.events_file, "server") if settings.events_file else None

    def on_state(c: Coordinator) -> None:
        if follow is not None:
            follow(c)
        if events is not None:
            events.write(state_event(c))

    options = ServerOptions(host=settings.host, port=settings.port)
    server = CentralizedServer(hub, options, on_state=on_state)
    return Built(server, data_server, data_port)


def _data_server(
    c: Coordinator, settings: ServerSettings
) -> tuple[DataServer | None, int | None, Any]:
    llm = c.model
    assert isinstance(llm, LLM)
    if not isinstance(llm.data_location, ServerData):
        return None, None, None
    if settings.data_config is None:
        raise ConfigError(
            "model.LLM.data_location is Server: pass --data-config data.toml to serve the data"
        )
    from psyche.data.local import LocalDataProvider
    from psyche.net.address import parse_address

    try:
        _, port = parse_address(llm.data_location.address)
    except ValueError as e:
        raise ConfigError(f"model.LLM.data_location.Server: {e}") from None
    dc = load_data_config(settings.data_config)
    dc.check_model(llm, settings.data_config)
    provider = LocalDataProvider(
        dc.resolved_dir(settings.data_config),
        dc.seq_len,
        dc.token_size,
        SeededShuffle(dc.shuffle_seed),
    )
    authorizer = RoundAuthorizer()

    def follow(state: Coordinator) -> None:
        keys, assigned = data_authorization(state)
        authorizer.update(keys, assigned, verifier_grants(state))

    return DataServer(provider, authorizer), port, follow


async def serve(settings: ServerSettings, console: Console | None = None) -> None:
    """Build, listen, tick until SIGINT/SIGTERM, then close everything."""
    built = build(settings)
    server = built.server
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    status = None
    try:
        await server.start()
        if settings.status_port is not None:
            from psyche.backends.centralized.status_http import StatusEndpoint, WitnessReports

            reports = WitnessReports()
            server.on_witness = reports.add
            status = StatusEndpoint(server, reports)
            await status.start(settings.host, settings.status_port)
            log.info("status endpoint on http://%s:%d/status", settings.host, status.port)
        if built.data_server is not None:
            await built.data_server.start(settings.host, built.data_port or 0)
            log.info("data server listening on %s:%d", settings.host, built.data_server.port)
        log.info("run %r: listening on %s:%d", server.run_id, settings.host, server.port)
        if console is not None and settings.tui:
            # The live view replaces log lines: the address clients need is printed above it.
            console.print(f"run {server.run_id!r}: listening on {settings.host}:{server.port}")
        ticking = asyncio.create_task(server.serve_forever())
        stopping = asyncio.create_task(stop.wait())
        live = (
            Live(
                console=console, get_renderable=lambda: render_status(server), refresh_per_second=2
            )
            if settings.tui
            else contextlib.nullcontext()
        )
        with live:
            await asyncio.wait({ticking, stopping}, return_when=asyncio.FIRST_COMPLETED)
        for t in (ticking, stopping):
            t.cancel()
        if ticking.done() and not ticking.cancelled() and (error := ticking.exception()):
            raise error
    finally:
        log.info("shutting down")
        if status is not None:
            await status.close()
        await server.close()
        if built.data_server is not None:
            await built.data_server.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
