"""A coordinator host on a simulated clock, for many clients in one event loop.

Named as what it is: the centralized server's own run host (membership, kicks, change
detection) with no sockets and a clock that moves only when :meth:`SimulatedHost.advance` is
called. Each client gets a :class:`SimulatedBackend` implementing the Backend seam: it receives
every published state as a fresh decode of the host's JSON (as over the wire, so no client can
touch the host's coordinator) and forwards the client's messages to the host at the simulated
time. A message the coordinator refuses is logged and dropped, as the server does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from psyche.backends.base import BackendClosedError, HealthCheckEntries
from psyche.backends.centralized.run_host import RunHost
from psyche.coordinator import Coordinator, CoordinatorException, Witness, WitnessMetadata
from psyche.coordinator import state_json as coordinator_json
from psyche.protocol.commitment import sha256
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint

__all__ = ["SimulatedBackend", "SimulatedHost"]

log = logging.getLogger("psyche.simulation")

START_UNIX = 1_700_000_000


class SimulatedHost:
    def __init__(self, coordinator: Coordinator, *, now: int = START_UNIX) -> None:
        coordinator.run_state_start_unix_timestamp = now
        self.now = now
        self.run_host = RunHost(coordinator)
        self.backends: dict[NodeIdentity, SimulatedBackend] = {}
        self._seed = 0
        self.on_publish: Callable[[Coordinator], None] | None = None
        """Called with each newly published state (the simulated run's round reports)."""

    @property
    def coordinator(self) -> Coordinator:
        return self.run_host.coordinator

    def clock(self) -> float:
        return float(self.now)

    def connect(self, who: NodeIdentity) -> SimulatedBackend:
        """A client joins (a reconnecting client replaces its old backend)."""
        old = self.backends.pop(who, None)
        if old is not None:
            old.closed = True
        backend = SimulatedBackend(self, who)
        self.backends[who] = backend
        self.run_host.join(who)
        backend.deliver(self.coordinator_copy())
        return backend

    def disconnect(self, who: NodeIdentity) -> None:
        backend = self.backends.pop(who, None)
        if backend is not None:
            backend.closed = True
        self._after(self.run_host.disconnect(who))

    def advance(self, seconds: int = 1) -> None:
        """Move the clock and tick the coordinator."""
        self.now += seconds
        self._after(self.run_host.tick(self.now, self._next_seed()))

    def quiet(self) -> bool:
        """Every published state has been taken by its client."""
        return all(not b.queue or b.closed for b in self.backends.values())

    def coordinator_copy(self) -> Coordinator:
        return coordinator_json.from_json(self.run_host.snapshot()[1])

    # --- what clients send ----------------------------------------------------------------------

    def _call(self, who: NodeIdentity, what: str, call: Callable[[], bool]) -> None:
        try:
            changed = call()
        except CoordinatorException as e:
            log.info("%s from %s refused: %s", what, who.hex()[:12], e)
            return
        self._after(changed)

    def _after(self, changed: bool) -> None:
        if not changed:
            return
        if self.on_publish is not None:
            self.on_publish(self.coordinator_copy())
        for backend in self.backends.values():
            if not backend.closed:  # its copy would be dropped unread: not decoded at all
                backend.deliver(self.coordinator_copy())

    def _next_seed(self) -> int:
        self._seed += 1
        return int.from_bytes(sha256(b"simulated-seed-%d" % self._seed)[:8], "little")


class SimulatedBackend:
    """One client's connection to a :class:`SimulatedHost` (Backend and PeerDirectory)."""

    def __init__(self, host: SimulatedHost, who: NodeIdentity) -> None:
        self.host = host
        self.who = who
        self.queue: list[Coordinator] = []
        self.closed = False
        self._new = asyncio.Event()

    def deliver(self, coord: Coordinator) -> None:
        if not self.closed:
            self.queue.append(coord)
            self._new.set()

    async def wait_for_new_state(self) -> Coordinator:
        while not self.queue:
            if self.closed:
                raise BackendClosedError("disconnected from the simulated host")
            self._new.clear()
            await self._new.wait()
        return self.queue.pop(0)

    def _send(self, what: str, call: Callable[[], bool]) -> None:
        if self.closed:
            raise BackendClosedError("disconnected from the simulated host")
        self.host._call(self.who, what, call)

    async def send_witness(self, witness: Witness, metadata: WitnessMetadata) -> None:
        host, now = self.host.run_host, self.host.now
        self._send("witness", lambda: host.witness(self.who, witness, metadata, now))

    async def send_warmup_witness(self, witness: Witness) -> None:
        run_host, now, seed = self.host.run_host, self.host.now, self.host._next_seed()
        self._send("warmup witness", lambda: run_host.warmup_witness(self.who, witness, now, seed))

    async def send_health_check(self, checks: HealthCheckEntries) -> None:
        self._send("health check", lambda: self.host.run_host.health_check(self.who, checks))

    async def send_checkpoint(self, index: int, checkpoint: Checkpoint) -> None:
        host, now = self.host.run_host, self.host.now
        self._send("checkpoint", lambda: host.checkpoint(self.who, index, checkpoint, now))

    async def close(self) -> None:
        self.closed = True
        self._new.set()

    async def publish_p2p_addrs(self, addrs: list[str]) -> None:
        return None  # every node of the in-memory network reaches every other

    def peer_addrs(self) -> dict[bytes, list[str]]:
        return {}
