"""What the explorer stores of one coordinator state, whichever backend it came from.

A :class:`StateObs` is the row of ``states`` plus what the runs list and the run page show (the
clients table, the checkpoint, tokens trained); both sources build it from the same
:class:`~psyche.coordinator.Coordinator` (decoded from the server's JSON or the chain account).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from psyche.coordinator import Coordinator
from psyche.events import checkpoint_label

__all__ = ["ClientRow", "MetricObs", "StateObs", "observe", "progress"]


@dataclass(frozen=True, slots=True)
class MetricObs:
    """One witness report: its metadata, keyed by ``ref`` (a signature, or the server's id)."""

    ref: str
    at: float
    client: str
    step: int
    loss: float
    tokens_per_sec: float
    bandwidth_per_sec: float
    efficiency: float
    evals: list[list[float]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ClientRow:
    id: str
    state: str
    healthy: bool
    earned: int | None = None
    slashed: int | None = None
    claimed: int | None = None
    connected: bool | None = None
    p2p: str | None = None
    """P2P reachability: on Solana from the client's peer record (``psyche.explorer.peers``),
    ``n/a`` on the centralized backend."""


@dataclass(slots=True)
class StateObs:
    seq: int
    observed_at: float
    run_id: str
    name: str
    phase: str
    phase_since: int
    epoch: int
    step: int
    total_steps: int
    height: int
    witnesses: int
    witness_target: int
    tokens: int
    checkpoint: str | None
    clients: list[ClientRow]
    extra: dict[str, Any] = field(default_factory=dict)
    max_round_train_time: int = 0
    """A round whose RoundWitness began before this many seconds ended opportunistically."""
    start_step: int = 0
    last_step: int = 0
    """The epoch's first and (once set) last step: rounds whose step + 2 reaches ``last_step``
    drain the pipeline and train nothing (``Coordinator.round_trained``)."""

    def detail(self) -> dict[str, Any]:
        """The JSON the run page reads for the latest state (``runs.detail``)."""
        return {
            "witnesses": self.witnesses,
            "witness_target": self.witness_target,
            "checkpoint": self.checkpoint,
            "start_step": self.start_step,
            "last_step": self.last_step,
            "clients": [
                {k: getattr(c, k) for k in ClientRow.__slots__ if getattr(c, k) is not None}
                for c in self.clients
            ],
            **self.extra,
        }


def observe(
    c: Coordinator,
    seq: int,
    *,
    name: str = "",
    clients: list[ClientRow] | None = None,
    now: float | None = None,
    extra: dict[str, Any] | None = None,
) -> StateObs:
    """``clients`` overrides the epoch's client list (a source that knows more per client)."""
    rnd = c.current_round()
    seq_len = int(getattr(c.model, "max_seq_len", 0) or 0)
    rows = clients
    if rows is None:
        rows = [
            ClientRow(x.id.hex(), x.state.name, x.state.name == "Healthy")
            for x in c.epoch_state.clients
        ]
    return StateObs(
        seq=seq,
        observed_at=time.time() if now is None else now,
        run_id=c.run_id,
        name=name or c.run_id,
        phase=c.run_state.name,
        phase_since=int(c.run_state_start_unix_timestamp),
        epoch=c.progress.epoch,
        step=c.progress.step,
        total_steps=int(c.config.total_steps),
        height=rnd.height,
        witnesses=len(rnd.witnesses),
        witness_target=c.witness_count(),
        tokens=int(c.total_tokens_processed()) if seq_len else 0,
        checkpoint=checkpoint_label(c),
        clients=rows,
        extra=dict(extra or {}),
        max_round_train_time=int(c.config.max_round_train_time),
        start_step=int(c.epoch_state.start_step),
        last_step=int(c.epoch_state.last_step),
    )


def progress(step: int, total_steps: int, phase: str, last_step: int = 0) -> dict[str, Any]:
    """The run's progress by the coordinator's own rule (``transitions``): steps are 1-based and
    ``progress.step`` is the step of the round in progress; when a round ends with ``step`` at
    ``total_steps`` the epoch winds down through drain rounds that advance ``step`` without
    training, so a run trains steps 1 … ``total_steps − 1`` and its ``step`` ends past
    ``total_steps``. ``trained_steps`` is the steps finished, clamped to that range (an epoch that
    ended by timeout also drains, so on a multi-epoch run a few numbered steps never train: this
    is an upper bound there, exact within the latest epoch: once its ``last_step`` is set, the
    steps from ``last_step − 2`` on are drain rounds); ``fraction`` is 1 once the run is
    Finished."""
    to_train = max(0, total_steps - 1)
    trained = min(max(0, step - 1), to_train)
    if last_step:
        trained = max(0, min(trained, last_step - 3))
    finished = phase == "Finished"
    fraction = 1.0 if finished else (trained / to_train if to_train else 0.0)
    return {
        "trained_steps": trained,
        "steps_to_train": to_train,
        "fraction": fraction,
        "finished": finished,
    }
