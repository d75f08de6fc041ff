"""A whole run in one process: N round engines, an in-memory network, a simulated clock.

This is what ``psyche demo`` runs, and what tests use to exercise the round engine in seconds.
Everything that decides is real and the same as in a client process: the coordinator (hosted by
the server's own run host), the :class:`~psyche.daemon.engine.RoundEngine` with its steps, the
model loader, real models trained with DisTrO, payloads encoded, committed, fetched, verified
and applied by witness consensus, checkpoints saved by the elected checkpointers. Two parts are
stand-ins, named as such: the network (:class:`~psyche.p2p.memory.MemoryNetwork`) and the clock
(:class:`~.host.SimulatedHost`).

The clock moves only when every engine is idle (no state or opportunistic work in progress, no
training, no download, no checkpoint being saved) and every message has been taken: then it
advances one second and ticks the coordinator. So simulated time never passes while real work
is done, a run is the same whatever the machine's speed, and timeouts happen only where some
client really stopped doing its part.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psyche.coordinator import Coordinator, RunState
from psyche.daemon.checkpointing import CheckpointOptions
from psyche.daemon.engine import RoundEngine
from psyche.daemon.kit import ModelKit, ModelLoader
from psyche.daemon.loader import model_loader
from psyche.daemon.parts import DaemonOptions, client_parts
from psyche.events import ApplyEvent, CheckpointEvent, EventLog, EventTail, TrainEvent
from psyche.p2p.memory import MemoryNetwork, MemoryTransport
from psyche.protocol.commitment import sha256
from psyche.protocol.identity import SecretKey
from psyche.protocol.locations import Checkpoint, HubCheckpoint, HubRepo, LocalData
from psyche.protocol.model import LLM
from psyche.protocol.run_file import RunConfig
from psyche.simulation.host import SimulatedBackend, SimulatedHost
from psyche.training.loading import resolve_checkpoint_dir

__all__ = ["RoundReport", "RunSummary", "SimulatedClient", "SimulatedRun"]

MODEL_REPO = "simulated-run/model"
"""The repo id the simulated coordinator names for the initial model (resolved to the local
model directory by the loader: a real path can exceed the coordinator's 64-byte repo ids)."""

SETTLE_CHECKS = 3


@dataclass
class RoundReport:
    epoch: int
    step: int
    height: int
    trained: bool
    end_reason: str
    """``opportunistic`` (every elected witness attested) or ``timeout``."""
    witnesses: int
    applied_batches: int
    loss: float | None
    payload_bytes: int
    compute_s: float
    model_hash: str
    hashes_agree: bool
    clients_hashed: int = 0
    """Clients whose parameter hash after this step's apply was read (``hashes_agree`` is over
    theirs): every running client's, unless one failed to apply."""


@dataclass
class RunSummary:
    rounds: list[RoundReport] = field(default_factory=list)
    epochs_completed: int = 0
    checkpoints: list[str] = field(default_factory=list)
    final_state: str = ""
    simulated_seconds: int = 0

    def to_json(self) -> dict[str, Any]:
        losses = [r.loss for r in self.rounds if r.loss is not None]
        return {
            "rounds": [dataclasses.asdict(r) for r in self.rounds],
            "epochs_completed": self.epochs_completed,
            "checkpoints": self.checkpoints,
            "final_state": self.final_state,
            "simulated_seconds": self.simulated_seconds,
            "first_loss": losses[0] if losses else None,
            "final_loss": losses[-1] if losses else None,
        }


@dataclass
class SimulatedClient:
    index: int
    key: SecretKey
    transport: MemoryTransport
    backend: SimulatedBackend
    engine: RoundEngine
    events: EventTail
    task: asyncio.Task[None]


@dataclass
class _Round:
    epoch: int
    step: int
    height: int
    trained: bool
    witnesses: int = 0
    witness_target: int = 0
    ended: bool = False


class SimulatedRun:
    """N clients of ``run`` on a simulated clock; ``await run()`` until it ends."""

    def __init__(
        self,
        run: RunConfig,
        model_dir: Path,
        data_dir: Path,
        out_dir: Path,
        *,
        n_clients: int,
        micro_batch_size: int = 2,
        device: str = "cpu",
        apply_deadline_s: float = 30.0,
        checkpoint: bool = True,
        on_kit: Callable[[int, ModelKit], ModelKit] | None = None,
        stall_after_s: float | None = None,
        daemon_options: Callable[[int], DaemonOptions | None] | None = None,
        model_checkpoint: Checkpoint | None = None,
    ) -> None:
        assert isinstance(run.model, LLM)
        llm = dataclasses.replace(
            run.model,
            # The run's checkpoint: by default the Hub stand-in that loads ``model_dir``; a test
            # may name a real one (a Gcs bucket on an emulator) the clients load and upload to.
            checkpoint=model_checkpoint or HubCheckpoint(HubRepo(repo_id=MODEL_REPO)),
            data_location=LocalData(path=str(data_dir)),
        )
        coord = Coordinator(
            run_id=run.run_id or "demo",
            config=run.config,
            model=llm,
            run_state=RunState.WaitingForMembers,
        )
        self.host = SimulatedHost(coord)
        self.host.on_publish = self._on_publish
        self.host.run_host._on_epoch_end = self._on_epoch_end
        self.network = MemoryNetwork()
        self.model_dir = model_dir
        self.out_dir = out_dir
        self.n_clients = n_clients
        self.micro_batch_size = micro_batch_size
        self.device = device
        self.apply_deadline_s = apply_deadline_s
        self.checkpoint = checkpoint
        self.on_kit = on_kit
        self.daemon_options = daemon_options
        """Client index → its flags beyond training (evals, gradients dir, …); None: defaults."""
        self.stall_after_s = stall_after_s
        """If set, the clock also advances after this many real seconds without every engine
        idle: a client that never finishes its work (a test's stuck trainer) must not stop
        time for the others, as a real clock would not. Off by default, so that a slow machine
        never turns into simulated timeouts."""
        """Sees (and may wrap) each client's model kit when it is built; tests use it to watch
        or break one client's trainer or data."""
        self.clients: dict[int, SimulatedClient] = {}
        self.summary = RunSummary()
        self._rounds: dict[int, _Round] = {}
        """Rounds by step, from the published states, until reported."""
        self._steps: dict[int, list[Any]] = {}
        """Per step: the train and apply events of every client."""

    @property
    def coordinator(self) -> Coordinator:
        return self.host.coordinator

    @staticmethod
    def key_of(index: int) -> SecretKey:
        return SecretKey.from_bytes(sha256(b"psyche-demo-client-%d" % index))

    # --- clients --------------------------------------------------------------------------------

    def start_client(self, index: int) -> SimulatedClient:
        """Start (or restart, as a new process would) client ``index``."""
        key = self.key_of(index)
        me = key.node_identity()
        transport = self.network.node(key)
        backend = self.host.connect(me)
        events_path = self.out_dir / "events" / f"client-{index}.jsonl"
        parts = client_parts(
            key=key,
            backend=backend,
            transport=transport,
            load=self._loader(index, key),
            events=EventLog(events_path, me.hex()),
            checkpoint=CheckpointOptions(checkpoint_dir=str(self.out_dir / "checkpoints"))
            if self.checkpoint
            else None,
            apply_deadline_s=self.apply_deadline_s,
            clock=self.host.clock,
            options=self.daemon_options(index) if self.daemon_options is not None else None,
        )
        engine = RoundEngine(parts, backend)
        task = asyncio.create_task(engine.run(), name=f"client-{index}")
        client = SimulatedClient(
            index, key, transport, backend, engine, EventTail(events_path), task
        )
        self.clients[index] = client
        return client

    async def kill_client(self, index: int) -> None:
        """Stop client ``index`` at once, as a crash would: its connection drops."""
        client = self.clients.pop(index)
        client.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await client.task
        client.transport.stop()
        self.host.disconnect(client.key.node_identity())

    def _loader(self, index: int, key: SecretKey) -> ModelLoader:
        load = model_loader(
            key, device=self.device, micro_batch_size=self.micro_batch_size, resolve=self._resolve
        )
        hook = self.on_kit
        if hook is None:
            return load
        return lambda coord, received: hook(index, load(coord, received))

    def _resolve(self, checkpoint: Checkpoint) -> Path:
        if isinstance(checkpoint, HubCheckpoint) and checkpoint.repo.repo_id == MODEL_REPO:
            return self.model_dir
        return resolve_checkpoint_dir(checkpoint)

    # --- the clock ------------------------------------------------------------------------------

    def idle(self) -> bool:
        return (
            self.host.quiet()
            and self.network.quiet()
            and all(c.task.done() or c.engine.idle() for c in self.clients.values())
        )

    async def settle(self) -> None:
        """Until every engine is idle and every message taken, several checks in a row (a task
        woken by a message runs only at the loop's next turn), or ``stall_after_s``."""
        calm = 0
        loop = asyncio.get_running_loop()
        give_up = None if self.stall_after_s is None else loop.time() + self.stall_after_s
        while calm < SETTLE_CHECKS:
            if give_up is not None and loop.time() > give_up:
                return
            await asyncio.sleep(0.002 if calm else 0.01)
            for c in self.clients.values():
                if c.task.done() and not c.task.cancelled() and c.task.exception() is not None:
                    raise RuntimeError(f"client {c.index} failed") from c.task.exception()
            calm = calm + 1 if self.idle() else 0

    async def run(
        self,
        on_round: Callable[[RoundReport], None] | None = None,
        *,
        max_epochs: int = 10,
        until: Callable[[SimulatedRun], bool] | None = None,
        max_seconds: int = 100_000,
    ) -> RunSummary:
        """Start the clients not started yet and advance the clock until the run is Finished
        or Paused, ``max_epochs`` epochs completed, ``until(self)`` holds, or ``max_seconds``
        of simulated time passed."""
        for i in range(self.n_clients):
            if i not in self.clients:
                self.start_client(i)
        start = self.host.now
        try:
            while True:
                await self.settle()
                self._report(on_round)
                c = self.coordinator
                if c.run_state in (RunState.Finished, RunState.Paused):
                    break
                if self.summary.epochs_completed >= max_epochs:
                    break
                if until is not None and until(self):
                    break
                if self.host.now - start >= max_seconds:
                    break
                self.host.advance(1)
                for client in self.clients.values():
                    client.engine.wake()
            await self.settle()
            self._report(on_round)
        finally:
            # The run is over: no client takes another state, so none is delivered. Otherwise
            # each client's disconnect would publish a state that every client still running
            # decodes (O(N) copies of an O(N) state per disconnect: most of a 64-client run's
            # teardown, issue 38).
            for client in self.clients.values():
                client.backend.closed = True
            for i in list(self.clients):
                await self.kill_client(i)
        self.summary.final_state = self.coordinator.run_state.name
        self.summary.simulated_seconds = self.host.now - start
        return self.summary

    # --- reports --------------------------------------------------------------------------------

    def _on_publish(self, c: Coordinator) -> None:
        step = c.progress.step
        if c.run_state is RunState.RoundTrain and step not in self._rounds:
            height = c.current_round().height
            self._rounds[step] = _Round(c.progress.epoch, step, height, not c.last_step_set())
        elif c.run_state is RunState.RoundWitness and step in self._rounds:
            r = self._rounds[step]
            if r.ended:
                return  # witnesses sent in the RoundWitness phase do not change how it ended
            r.witnesses, r.witness_target = len(c.current_round().witnesses), c.witness_count()
            r.ended = True

    def _on_epoch_end(self, c: Coordinator) -> None:
        self.summary.epochs_completed += 1

    def _report(self, on_round: Callable[[RoundReport], None] | None) -> None:
        for client in self.clients.values():
            for e in client.events.poll():
                if isinstance(e, TrainEvent | ApplyEvent):
                    self._steps.setdefault(e.step, []).append(e)
                elif isinstance(e, CheckpointEvent):
                    self.summary.checkpoints.append(e.path)
        for step in sorted(s for s, r in self._rounds.items() if r.ended):
            r = self._rounds.pop(step)
            events = self._steps.pop(step, [])
            trains = [e for e in events if isinstance(e, TrainEvent)]
            applies = [e for e in events if isinstance(e, ApplyEvent)]
            hashes = {e.model_hash for e in applies}
            report = RoundReport(
                epoch=r.epoch,
                step=r.step,
                height=r.height,
                trained=r.trained,
                end_reason="opportunistic" if r.witnesses >= r.witness_target else "timeout",
                witnesses=r.witnesses,
                applied_batches=max((e.batches for e in applies), default=0),
                loss=sum(e.loss for e in trains) / len(trains) if trains else None,
                payload_bytes=max((e.payload_bytes for e in trains), default=0),
                compute_s=max((e.compute_s for e in trains), default=0.0),
                model_hash=min(hashes, default=""),
                hashes_agree=len(hashes) == 1,
                clients_hashed=len(applies),
            )
            self.summary.rounds.append(report)
            if on_round is not None:
                on_round(report)
