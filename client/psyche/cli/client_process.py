"""Assembles a client process: identity, coordinator backend, P2P node, model loader, engine.

Kept apart from :mod:`psyche.daemon` so the round engine never builds its own parts (the
simulated run and tests hand it in-memory ones) and never chooses a backend, and so exit codes
live in one place. The Solana client (:mod:`psyche.cli.solana_client_process`) assembles the same
process with its own backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from psyche.backends.base import Backend, BackendError, JoinRejectedError
from psyche.backends.centralized.backend import CentralizedBackend
from psyche.checkpoint.p2p import ReceivedModel
from psyche.cli.daemon_options import TrainingFlags
from psyche.cli.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_TERMINATED
from psyche.coordinator import Coordinator
from psyche.daemon.checkpointing import CheckpointOptions
from psyche.daemon.engine import RoundEngine
from psyche.daemon.kit import ModelKit, ModelLoader
from psyche.daemon.loader import model_loader
from psyche.daemon.parts import PeerDirectory, client_parts
from psyche.daemon.sharing import SharingOptions
from psyche.distro.copy_index import prepare as prepare_copy_check
from psyche.evals import EvalTaskError
from psyche.events import EventLog, EventSink
from psyche.p2p.errors import NodeStopped
from psyche.p2p.node import P2PNode
from psyche.protocol.identity import SecretKey, secret_key_from_env_or_file

log = logging.getLogger("psyche.client")

EXIT_JOIN_REJECTED = EXIT_CONFIG
TERMINATED_LINE = "terminated (SIGTERM); shut down cleanly"
"""What a client logs when SIGTERM stopped it (exit 143), wherever it was waiting."""


class ClientBackend(Backend, PeerDirectory, Protocol):
    """A backend that also relays peers, as ``run_client`` needs (centralized or Solana)."""

    async def connect(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    run_id: str
    coordinator_addr: str
    """Where the coordinator is: the server's ``host:port``, or the Solana RPC URL (logged)."""
    key_path: str | None = None
    raw_key: str | None = None
    p2p_host: str = "127.0.0.1"
    p2p_port: int = 0
    p2p_blob_dir: Path | None = None
    """``--p2p-blob-dir``: the root of the P2P node's own blob directory (None: its default)."""
    micro_batch_size: int = 2
    device: str = "auto"
    event_log: str | None = None
    checkpoint: CheckpointOptions = field(default_factory=CheckpointOptions)
    sharing: SharingOptions = field(default_factory=SharingOptions)
    training: TrainingFlags | None = None
    """Parallelism, evals, metrics and debugging flags (none: the defaults)."""


async def run_client(
    options: ClientOptions,
    *,
    key: SecretKey | None = None,
    make_backend: Callable[[SecretKey], ClientBackend] | None = None,
    terminated: asyncio.Event | None = None,
) -> int:
    """``key`` and ``make_backend`` default to the key file and the centralized backend;
    ``terminated``: the event of a SIGTERM handler the caller installed already
    (:func:`cancel_on_sigterm`, before its own network waits). Returns the exit code."""
    # First: a SIGTERM while the metric sinks start (W&B takes seconds) is a clean stop too;
    # the cancellation it asks for lands at the first await inside the ``try`` below.
    if terminated is None:
        terminated = cancel_on_sigterm()
    key = key or secret_key_from_env_or_file(options.key_path, options.raw_key)
    me = key.node_identity()
    log.info("client %s joining run %r at %s", me.hex(), options.run_id, options.coordinator_addr)
    backend: ClientBackend = (
        make_backend(key)
        if make_backend is not None
        else CentralizedBackend(options.coordinator_addr, key, options.run_id)
    )
    p2p = P2PNode()
    events = EventLog(options.event_log, me.hex(), sinks=metric_sinks(options, me.hex()))
    kits: list[ModelKit] = []
    try:
        return await _train(options, key, backend, p2p, events, kits)
    except JoinRejectedError as e:
        log.error("%s", e)
        return EXIT_JOIN_REJECTED
    except BackendError as e:
        code = getattr(e, "exit_code", None)
        if code is None:
            log.error("coordinator connection failed: %s", e)
            return EXIT_ERROR
        log.error("%s", e)
        return int(code)
    except NodeStopped as e:
        if terminated.is_set():  # SIGTERM to the process group ends the host too
            log.warning(TERMINATED_LINE)
            return EXIT_TERMINATED
        # A run-time failure (exit 1), which the image's entrypoint answers with a restart.
        log.error("%s; stopping", e)
        return EXIT_ERROR
    except asyncio.CancelledError:
        if not terminated.is_set():
            raise
        log.warning(TERMINATED_LINE)
        return EXIT_TERMINATED
    finally:
        await _shut_down(kits, p2p, backend, events)


async def _train(
    options: ClientOptions,
    key: SecretKey,
    backend: ClientBackend,
    p2p: P2PNode,
    events: EventLog,
    kits: list[ModelKit],
) -> int:
    """Assemble the round engine's parts, connect to the coordinator and the peers, and run the
    engine until the run is finished (``kits``: the model kits it loads, for the shutdown)."""
    flags = options.training
    try:
        parts = client_parts(
            key=key,
            backend=backend,
            transport=p2p,
            load=_remembering(kits, _loader(key, options)),
            events=events,
            checkpoint=options.checkpoint,
            sharing=options.sharing,
            options=flags.daemon if flags is not None else None,
        )
    except EvalTaskError as e:
        log.error("--eval-tasks: %s", e)
        return EXIT_CONFIG
    # The copy check's compiled loops load now (about 2 s of CPU), not when the first result
    # arrives; on this thread, before any network wait, so no worker thread outlives the loop.
    # A SIGTERM meanwhile is handled right after.
    prepare_copy_check()
    try:
        await backend.connect()
        await p2p.start(
            key,
            run_id=options.run_id,
            listen_port=options.p2p_port,
            listen_host=options.p2p_host,
            blob_root=options.p2p_blob_dir,
        )
        log.info("P2P blobs are kept in %s", p2p.blob_dir)
        await RoundEngine(parts, backend).run()
    except BaseExceptionGroup as group:
        # The engine's task groups wrap what ended them; the backend's verdict (withdrawn,
        # not authorized, wrong version) is the outcome to report, not the group.
        raise _backend_error(group) from None
    log.info("run %r finished", options.run_id)
    return EXIT_OK


async def _shut_down(
    kits: list[ModelKit], p2p: P2PNode, backend: ClientBackend, events: EventLog
) -> None:
    """However the client ended: SIGTERM kills again, the trainers' workers stop first (nothing
    below may keep them waiting), then the P2P node, the backend and the event log."""
    remove_sigterm_handler()
    for kit in kits:
        _close_trainer(kit)
    try:
        await p2p.stop()
        await backend.close()
    finally:
        events.close()


def _backend_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first backend error in ``group`` (nested groups searched), else the P2P host's end,
    else ``group`` itself; a cancellation (SIGTERM) in the group wins, so a clean stop stays
    one."""
    if group.subgroup(asyncio.CancelledError) is not None:
        return asyncio.CancelledError()
    found: BaseException | None = group.subgroup(BackendError) or group.subgroup(NodeStopped)
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found if found is not None else group


def cancel_on_sigterm() -> asyncio.Event:
    """SIGTERM cancels the calling task, so ``run_client`` unwinds through its ``finally`` (the
    data-parallel workers stopped, the checkpoint upload awaited, peers told) instead of dying
    where it stands. Returns the event set when that happened.

    If the cancellation has not reached the shutdown :data:`STOP_NUDGE_S` later, something
    swallowed it (CI saw a joined Solana client sit idle for a minute after SIGTERM; the likely
    cause, Python 3.11's ``asyncio.wait_for`` losing a cancel that lands as its wait completes,
    is gone from the client: tests/unit/test_cancellation.py): the tasks still pending are
    logged with where each waits, and all of them are cancelled again. The shutdown itself
    (:func:`remove_sigterm_handler` onwards) is never hurried: a checkpoint upload may take its
    time."""
    terminated = asyncio.Event()
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()

    def nudge() -> None:
        _NUDGES.pop(loop, None)
        if task is None or task.done():
            return
        log.warning(
            "SIGTERM: still not stopping after %g s; cancelling again the tasks that wait on: %s",
            STOP_NUDGE_S,
            _waiting_on(loop),
        )
        for other in asyncio.all_tasks(loop):
            other.cancel()

    def on_sigterm() -> None:
        terminated.set()
        if task is not None:
            task.cancel()
            if loop not in _NUDGES:
                _NUDGES[loop] = loop.call_later(STOP_NUDGE_S, nudge)

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    return terminated


STOP_NUDGE_S = 15.0
"""How long a SIGTERM's cancellation may take to reach the client's shutdown before the client
cancels every task again (well inside the minute a supervisor usually grants)."""
_NUDGES: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}


def _waiting_on(loop: asyncio.AbstractEventLoop) -> str:
    """Each pending task's name and the innermost line it waits at."""
    where = []
    for t in asyncio.all_tasks(loop):
        frames = t.get_stack()
        at = f"{frames[-1].f_code.co_filename}:{frames[-1].f_lineno}" if frames else "?"
        where.append(f"{t.get_name()} at {at}")
    return "; ".join(sorted(where)) or "nothing"


def remove_sigterm_handler() -> None:
    """Undo :func:`cancel_on_sigterm` (SIGTERM kills again): once the client has stopped, a
    second SIGTERM must not cancel what is left of its shutdown."""
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop = asyncio.get_running_loop()
        loop.remove_signal_handler(signal.SIGTERM)
        nudge = _NUDGES.pop(loop, None)
        if nudge is not None:
            nudge.cancel()


def _close_trainer(kit: ModelKit) -> None:
    close = getattr(kit.trainer, "close", None)
    if close is not None:
        close()  # data/tensor-parallel workers


def _loader(key: SecretKey, options: ClientOptions) -> ModelLoader:
    flags = options.training
    return model_loader(
        key,
        device=options.device,
        micro_batch_size=options.micro_batch_size,
        data_parallelism=flags.data_parallelism if flags is not None else 1,
        tensor_parallelism=flags.tensor_parallelism if flags is not None else 1,
        grad_accum_fp32=flags.grad_accum_fp32 if flags is not None else False,
    )


def _remembering(kits: list[ModelKit], load: ModelLoader) -> ModelLoader:
    """``load``, keeping the kit it built last so the process can close its trainer at exit. A
    new kit replaces the engine's previous one (a client that dropped out reloads), whose
    trainer is closed then: its data-parallel workers would otherwise outlive it."""

    def remembered(coord: Coordinator, received: ReceivedModel | None) -> ModelKit:
        kit = load(coord, received)
        for old in kits:
            _close_trainer(old)
        kits[:] = [kit]
        return kit

    return remembered


def metric_sinks(options: ClientOptions, client: str) -> list[EventSink]:
    """The status line always; W&B with ``--wandb-project``."""
    from psyche.metrics import StatusLine, WandbSink

    sinks: list[EventSink] = [StatusLine(logging.getLogger("psyche.status"))]
    flags = options.training
    if flags is not None and flags.wandb is not None:
        config = {
            "run_id": options.run_id,
            "client": client,
            "micro_batch_size": options.micro_batch_size,
            "data_parallelism": flags.data_parallelism,
            "tensor_parallelism": flags.tensor_parallelism,
            "device": options.device,
        }
        sinks.append(WandbSink(flags.wandb, client=client, config=config))
    return sinks
