"""The run summary of a local testnet, rebuilt from the event logs the processes write.

Sources: the server's ``--events-file`` (one line per published coordinator state) and each
client's ``--event-log`` (``train`` with loss and pure compute time, ``apply`` with the model hash
right after the round's apply). Rounds are keyed by (epoch, step); each lists the intervals
re-assigned in it (``retries``, docs/protocol.md #15) and the intervals its clients trained. A
round ends ``opportunistic``-ally when its RoundWitness began with the full witness count, else by
``timeout``. Reading logs after the fact keeps the launcher free of protocol logic and makes the
summary reproducible from the files alone.

Each client also logs ``rejections`` events (the peer input it refused, by kind, cumulative per
process; :mod:`psyche.p2p.rejections`): a client's entry sums its processes' last counts (a
restarted client starts again from zero under the same label), and ``rejections`` sums all
clients.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from psyche.events import (
    ApplyEvent,
    EvalEvent,
    ModelLoadedEvent,
    RejectionsEvent,
    StateEvent,
    TrainEvent,
    read_events,
)
from psyche.p2p.rejections import merge_counts


@dataclass
class ClientTally:
    joins: int = 0
    drops: int = 0
    kills: int = 0
    started_at: list[float] = field(default_factory=list)
    """Unix times the launcher started this client's process."""
    killed_at: list[float] = field(default_factory=list)
    """Unix times the launcher killed it."""
    rejections: dict[str, int] = field(default_factory=dict)
    """Peer input this client refused, by kind, summed over its processes (from its log)."""


@dataclass
class Summary:
    rounds: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    clients: dict[str, ClientTally] = field(default_factory=dict)
    epochs_completed: int = 0
    final_loss: float | None = None
    final_state: str = ""
    rejections: dict[str, int] = field(default_factory=dict)
    """Peer input refused, by kind, summed over every client."""
    evals: list[dict[str, Any]] = field(default_factory=list)
    """Every eval pass's score, per client and task (``--eval-tasks``), in the order run."""

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "epochs": self.epochs,
            "clients": {k: vars(v) for k, v in sorted(self.clients.items())},
            "epochs_completed": self.epochs_completed,
            "final_loss": self.final_loss,
            "final_state": self.final_state,
            "rejections": self.rejections,
            "evals": self.evals,
        }


def _copy(t: ClientTally) -> ClientTally:
    return replace(t, started_at=list(t.started_at), killed_at=list(t.killed_at), rejections={})


@dataclass
class _ClientLogs:
    """What the clients' event logs say, indexed for the summary."""

    ids: dict[str, str] = field(default_factory=dict)
    """Client id (as the coordinator names it) → launcher label."""
    train: dict[tuple[int, str], TrainEvent] = field(default_factory=dict)
    apply: dict[tuple[int, str], str] = field(default_factory=dict)
    """(step, client id) → the model hash right after that step's apply."""
    loads: list[tuple[str, ModelLoadedEvent]] = field(default_factory=list)
    rejected: dict[str, dict[tuple[int, float], dict[str, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    """Label → (pid, since) → the process's last cumulative rejection counts."""
    evals: list[dict[str, Any]] = field(default_factory=list)


def _read_client_logs(client_logs: dict[str, Path]) -> _ClientLogs:
    logs = _ClientLogs()
    for label, path in client_logs.items():
        for e in read_events(path):
            logs.ids[e.client] = label
            if isinstance(e, RejectionsEvent):
                # Cumulative per process: the last event of each process counts.
                logs.rejected[label][(e.pid, e.since)] = e.counts
            elif isinstance(e, ModelLoadedEvent):
                logs.loads.append((label, e))
            elif isinstance(e, TrainEvent):
                logs.train[(e.step, e.client)] = e
            elif isinstance(e, ApplyEvent):
                logs.apply[(e.step, e.client)] = e.model_hash
            elif isinstance(e, EvalEvent):
                logs.evals.append(
                    {
                        "client": label,
                        "step": e.step,
                        "task": e.task,
                        "accuracy": e.accuracy,
                        "accuracy_norm": e.accuracy_norm,
                        "docs": e.docs,
                        "complete": e.complete,
                    }
                )
    return logs


def build_summary(
    server_events: Path, client_logs: dict[str, Path], tallies: dict[str, ClientTally]
) -> Summary:
    """``client_logs`` maps a launcher label (client-1 …) to its event log; ``tallies`` holds
    the launcher's own counts of process starts and kills, by the same label."""
    states = [e for e in read_events(server_events) if isinstance(e, StateEvent)]
    logs = _read_client_logs(client_logs)
    # Copies: drops are counted here, and the launcher rebuilds the summary while the run goes
    # on; counting into its own tallies would add the same drops again at every rebuild.
    out = Summary(
        clients={label: _copy(tallies.get(label, ClientTally())) for label in client_logs},
        evals=logs.evals,
    )
    for label, per_process in logs.rejected.items():
        out.clients[label].rejections = merge_counts(per_process.values())
    out.rejections = merge_counts(t.rejections for t in out.clients.values())
    _follow_states(states, logs.ids, out)
    out.rounds = _round_entries(states, logs)
    trained = [r for r in out.rounds if r["loss"]]
    if trained:
        out.final_loss = statistics.fmean(trained[-1]["loss"].values())
    out.epochs = epoch_entries(states, out.rounds, logs.loads, logs.ids, out.clients)
    return out


def _follow_states(states: list[StateEvent], ids: dict[str, str], out: Summary) -> None:
    """The run's course in ``out``: the epochs completed (each Cooldown left), each client's
    drops (a Healthy client that is no longer) and the last run state."""
    prev_state: str | None = None
    prev_clients: dict[str, str] = {}
    for e in states:
        if prev_state == "Cooldown" and e.run_state != "Cooldown":
            out.epochs_completed += 1
        for cid, st in e.clients.items():
            if st != "Healthy" and prev_clients.get(cid) == "Healthy" and cid in ids:
                out.clients[ids[cid]].drops += 1
        prev_clients = e.clients
        prev_state = e.run_state
        out.final_state = e.run_state


def _server_rounds(states: list[StateEvent]) -> list[dict[str, Any]]:
    """Each round as the server logged it, in order: it starts at its first RoundTrain and ends
    ``opportunistic``-ally when its RoundWitness began with the full witness count. The private
    ``_target`` and ``_ended_at`` are for :func:`_round_entries`."""
    rounds: dict[tuple[int, int], dict[str, Any]] = {}
    for e in states:
        key = (e.epoch, e.step)
        if e.run_state == "RoundTrain" and key not in rounds:
            rounds[key] = {
                "epoch": e.epoch,
                "step": e.step,
                "height": e.height,
                "started_at": e.t,
                "end_reason": "timeout",
                "witnesses": 0,
                "retries": [list(b) for b in e.retries],
                "_target": e.witness_target,
            }
        if e.run_state in ("RoundTrain", "RoundWitness") and key in rounds:
            r = rounds[key]
            r["witnesses"] = max(r["witnesses"], e.witnesses)
            if e.run_state == "RoundWitness" and "_ended_at" not in r:
                r["_ended_at"] = e.t
                if e.witnesses >= r["_target"]:
                    r["end_reason"] = "opportunistic"
    return list(rounds.values())


def _round_entries(states: list[StateEvent], logs: _ClientLogs) -> list[dict[str, Any]]:
    """One entry per round: the server's view joined with what its clients trained and applied.
    A round lasts until the next one starts (or until its witness phase, or the last state)."""
    rounds = _server_rounds(states)
    last_t = states[-1].t if states else 0.0
    ids = logs.ids
    # Index the client events by step once (the summary is rebuilt while a run goes on).
    train_at: dict[int, list[tuple[str, TrainEvent]]] = defaultdict(list)
    for (s, c), t in logs.train.items():
        train_at[s].append((c, t))
    apply_at: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for (s, c), h in logs.apply.items():
        apply_at[s].append((c, h))
    entries = []
    for i, r in enumerate(rounds):
        end = rounds[i + 1]["started_at"] if i + 1 < len(rounds) else r.get("_ended_at", last_t)
        step = r["step"]
        losses = {ids[c]: t.loss for c, t in train_at[step] if c in ids}
        compute = [t.compute_s for _, t in train_at[step]]
        entries.append(
            {
                "epoch": r["epoch"],
                "step": step,
                "height": r["height"],
                "started_at": r["started_at"],
                "duration_s": round(end - r["started_at"], 3),
                "compute_s": round(statistics.median(compute), 4) if compute else 0.0,
                "end_reason": r["end_reason"],
                "witnesses": r["witnesses"],
                "retries": r["retries"],
                "trained": sorted(list(t.batch) for _, t in train_at[step]),
                "loss": dict(sorted(losses.items())),
                "model_hash": dict(sorted((ids[c], h) for c, h in apply_at[step] if c in ids)),
            }
        )
    return entries


def epoch_entries(
    states: list[StateEvent],
    rounds: list[dict[str, Any]],
    loads: list[tuple[str, ModelLoadedEvent]],
    ids: dict[str, str],
    tallies: dict[str, ClientTally],
) -> list[dict[str, Any]]:
    """One entry per epoch the server logged: when it ran, who trained, where each client got
    the model from (``checkpoint`` is what the coordinator named while the epoch warmed up;
    ``model_sources`` what each client actually loaded), which clients joined it after the run
    had started (late joiners and restarted clients) and how long each took to become ready,
    the kills that fell inside it, and the checkpoint the coordinator recorded at its end.

    An epoch's window runs from its first logged state to the first state of the next epoch;
    a client's load belongs to the epoch whose window holds the ``model_loaded`` event."""
    by_epoch: dict[int, list[StateEvent]] = defaultdict(list)
    for e in states:
        by_epoch[e.epoch].append(e)
    epochs = sorted(by_epoch)
    # Clients started before the run's first Warmup are its founders; later starts are joiners.
    first_t = next((e.t for e in states if e.run_state == "Warmup"), float("inf"))
    out: list[dict[str, Any]] = []
    for i, epoch in enumerate(epochs):
        es = by_epoch[epoch]
        start = es[0].t
        end = by_epoch[epochs[i + 1]][0].t if i + 1 < len(epochs) else None
        warmup = next((e.t for e in es if e.run_state == "Warmup"), None)
        trained = [e for e in es if e.run_state in ("RoundTrain", "RoundWitness")]
        members = sorted({ids[c] for e in trained for c in e.clients if c in ids})
        steps = [r["step"] for r in rounds if r["epoch"] == epoch]
        in_window = [
            (label, ld) for label, ld in loads if ld.t >= start and (end is None or ld.t < end)
        ]
        out.append(
            {
                "epoch": epoch,
                "started_at": start,
                "duration_s": round(end - start, 3) if end is not None else None,
                "steps": [min(steps), max(steps)] if steps else [],
                "clients": members,
                "checkpoint": es[0].checkpoint,
                "model_sources": {label: ld.source for label, ld in in_window},
                "joiners": _joiners(in_window, tallies, first_t, warmup),
                "kills": _kills(tallies, start, end),
                "checkpoint_after": (
                    by_epoch[epochs[i + 1]][0].checkpoint if i + 1 < len(epochs) else None
                ),
            }
        )
    return out


def _joiners(
    in_window: list[tuple[str, ModelLoadedEvent]],
    tallies: dict[str, ClientTally],
    first_t: float,
    warmup: float | None,
) -> list[dict[str, Any]]:
    """The epoch's loads by clients that joined after the run had started (``first_t``, its
    first Warmup), in load order, with how long each took to become ready."""
    joiners = []
    for label, ld in sorted(in_window, key=lambda x: x[1].t):
        starts = [t for t in tallies.get(label, ClientTally()).started_at if t <= ld.t]
        # A founder is a client's first process, started before the run's first Warmup. A
        # restart is a joiner even when it came back before that Warmup (a kill while the
        # run still waited for members, as a slow machine makes likely): its kill counts in
        # this epoch, so its load must too.
        if not starts or (len(starts) == 1 and starts[0] <= first_t):
            continue
        joiners.append(
            {
                "client": label,
                "source": ld.source,
                "peers": len(ld.peers),
                "ready_s": round(ld.t - max(starts), 3),
                "ready_after_warmup_s": round(ld.t - warmup, 3) if warmup is not None else None,
                "fetch_s": ld.seconds,
            }
        )
    return joiners


def _kills(
    tallies: dict[str, ClientTally], start: float, end: float | None
) -> list[dict[str, Any]]:
    """The launcher's kills inside the window [start, end), in time order, as seconds after its
    start."""
    kills = sorted(
        (round(t - start, 3), label)
        for label, tally in tallies.items()
        for t in tally.killed_at
        if t >= start and (end is None or t < end)
    )
    return [{"client": label, "after_s": dt} for dt, label in kills]


def plot_losses(summary: Summary, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_client: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in summary.rounds:
        for c, loss in r["loss"].items():
            per_client[c].append((r["step"], loss))
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for c, pts in sorted(per_client.items()):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, lw=1, label=c)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if per_client:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
