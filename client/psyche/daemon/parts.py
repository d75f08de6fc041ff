"""What the round engine's steps share: the client's parts, the model kit and what it knows now.

The steps (:mod:`.warmup`, :mod:`.training`, :mod:`.witnessing`, :mod:`.cooldown`) get these
from :class:`~psyche.daemon.engine.RoundEngine`; none of them builds a part itself, so the
client process, the simulated run and the tests hand the same steps real or in-memory parts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from psyche.backends.base import Backend
from psyche.coordinator import ClientState, Coordinator
from psyche.daemon.audit_serving import AuditBlobs
from psyche.daemon.checkpointing import Checkpointer, CheckpointOptions
from psyche.daemon.epoch import EpochView
from psyche.daemon.evaluating import EvalOptions, Evaluating
from psyche.daemon.kit import ClientStats, ModelKit, ModelLoader
from psyche.daemon.result_serving import ResultBlobs
from psyche.daemon.sharing import ModelSharing, SharingOptions
from psyche.events import EventLog
from psyche.p2p.rejections import Rejections
from psyche.p2p.transport import Transport
from psyche.protocol.identity import NodeIdentity, SecretKey

__all__ = [
    "ClientParts",
    "DaemonOptions",
    "Holdings",
    "PeerDirectory",
    "client_parts",
    "healthy_index",
]


class PeerDirectory(Protocol):
    """Where the client learns the P2P addresses of other clients (the coordinator only knows
    their keys). The centralized backend relays them; the Solana backend reads them from
    ``--bootstrap-peers``."""

    async def publish_p2p_addrs(self, addrs: list[str]) -> None: ...

    def peer_addrs(self) -> dict[bytes, list[str]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonOptions:
    """The client's flags that change what a round does beyond training itself."""

    optim_stats_steps: int | None = None
    """``--optim-stats-steps``: optimizer statistics every N steps (an ``optim_stats`` event)."""
    training_delay_s: float = 0.0
    """``--dummy-training-delay-secs``: hold each result back this long before publishing it, to
    act out a slower machine (stragglers, the round timeout) with real training."""
    max_concurrent_downloads: int = 8
    """``--max-concurrent-downloads``: peers' results fetched at once."""
    gradients_dir: Path | None = None
    """``--write-gradients-dir``: every verified payload (peers' and our own) is written here."""
    evals: EvalOptions | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientParts:
    """The parts one client is made of; fixed for the life of the process."""

    key: SecretKey
    backend: Backend
    transport: Transport
    events: EventLog
    rejections: Rejections
    sharing: ModelSharing
    checkpointer: Checkpointer
    load: ModelLoader
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to make the engine look for opportunistic work now (see :meth:`wake`)."""
    clock: Callable[[], float] = time.monotonic
    """Seconds, for the warmup grace; the simulated run passes its own clock."""
    apply_deadline_s: float = 30.0
    options: DaemonOptions = field(default_factory=DaemonOptions)
    stats: ClientStats = field(default_factory=ClientStats)
    evals: Evaluating | None = None
    downloads: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))
    """Bounds the peers' results fetched at once (``--max-concurrent-downloads``)."""
    audit_blobs: AuditBlobs = field(default_factory=AuditBlobs)
    """The SparseLoCo inner states this client serves to its verifiers."""
    result_blobs: ResultBlobs = field(default_factory=ResultBlobs)
    """The round results (own and peers') this client serves, withdrawn as rounds pass."""

    @property
    def identity(self) -> NodeIdentity:
        return self.key.node_identity()

    def wake(self) -> None:
        """Something that can unblock opportunistic work happened (a training finished, a
        download arrived, a peer announced Finished)."""
        self.woken.set()


def client_parts(
    *,
    key: SecretKey,
    backend: Backend,
    transport: Transport,
    load: ModelLoader,
    events: EventLog,
    checkpoint: CheckpointOptions | None = None,
    sharing: SharingOptions | None = None,
    apply_deadline_s: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
    options: DaemonOptions | None = None,
) -> ClientParts:
    """One client's parts, with the rejection counter the engine and sharing share. The eval
    tasks (``options.evals``) are read here, so a bad ``--eval-tasks`` fails before joining."""
    rejections = Rejections(logging.getLogger("psyche.daemon"))
    options = options or DaemonOptions()
    stats = ClientStats()
    evals = None
    if options.evals is not None:
        evals = Evaluating(options.evals, events, stats)
        evals.load()
    return ClientParts(
        key=key,
        backend=backend,
        transport=transport,
        events=events,
        rejections=rejections,
        sharing=ModelSharing(key, transport, sharing or SharingOptions(), rejections),
        checkpointer=Checkpointer(checkpoint or CheckpointOptions(), backend, events),
        load=load,
        clock=clock,
        apply_deadline_s=apply_deadline_s,
        options=options,
        stats=stats,
        evals=evals,
        downloads=asyncio.Semaphore(options.max_concurrent_downloads),
    )


@dataclass
class Holdings:
    """What the client holds right now; the engine replaces parts of it as states arrive."""

    coord: Coordinator | None = None
    """The newest coordinator state seen."""
    epoch: EpochView | None = None
    kit: ModelKit | None = None


def healthy_index(parts: ClientParts, coord: Coordinator) -> int | None:
    """This client's index in the epoch, if it is listed and healthy."""
    i = coord.index_of(parts.identity)
    if i is None or coord.epoch_state.clients[i].state is not ClientState.Healthy:
        return None
    return i
