"""The server's status view (``--tui true``): run state, members and recent events at a glance.

The view is a pure function of the server's current objects, re-rendered by ``rich.live.Live`` a
few times a second; it never mutates anything, so it cannot disturb the run. Without the TUI the
same information reaches the operator as log lines (every hub event is logged), which is what a
service manager or a test wants.
"""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table

from psyche.backends.centralized.server import CentralizedServer
from psyche.coordinator.types import ClientState
from psyche.protocol.identity import NodeIdentity

__all__ = ["render_status"]

_STATE_STYLE = {
    ClientState.Healthy: "green",
    ClientState.Dropped: "yellow",
    ClientState.Withdrawn: "yellow",
    ClientState.Ejected: "red",
}


def _summary(server: CentralizedServer, now: float) -> Table:
    c = server.hub.coordinator
    hub = server.hub
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    in_state = max(0, int(now) - c.run_state_start_unix_timestamp)
    t.add_row("run", f"{c.run_id}  ([cyan]{c.run_state.name}[/] for {in_state} s)")
    t.add_row(
        "progress",
        f"epoch {c.progress.epoch}, step {c.progress.step}, round height "
        f"{c.current_round().height}, data index {c.current_round().data_index}",
    )
    t.add_row(
        "members",
        f"{len(c.epoch_state.clients)} in epoch, {len(hub.pending)} pending, "
        f"{len(server.connections)} connected, {len(hub.kicked)} kicked",
    )
    cfg = c.config
    t.add_row(
        "config",
        f"warmup {cfg.warmup_time} s, round {cfg.max_round_train_time} s, "
        f"epoch {cfg.epoch_time} s, {cfg.total_steps} steps",
    )
    port = server.port if server.listening else server.options.port
    stats = ", ".join(f"{v} {k}" for k, v in server.stats.items())
    t.add_row("server", f"port {port}, {hub.seq - hub.first_seq} states published, {stats}")
    t.add_row("faults", server.faults.summary())
    return t


def _clients(server: CentralizedServer) -> Table:
    c = server.hub.coordinator
    t = Table(title="clients", expand=True)
    for col in ("id", "epoch index", "state", "connected", "pending"):
        t.add_column(col)
    seen: dict[NodeIdentity, None] = {}
    for who in (*(x.id for x in c.epoch_state.clients), *server.hub.pending, *server.connections):
        seen.setdefault(who, None)
    for who in seen:
        index = c.index_of(who)
        if index is None:
            state = "—"
        else:
            cs = c.epoch_state.clients[index].state
            state = f"[{_STATE_STYLE[cs]}]{cs.name}[/]"
        kicked = " (kicked)" if who in server.hub.kicked else ""
        t.add_row(
            who.hex(),
            "—" if index is None else str(index),
            state + kicked,
            "yes" if who in server.connections else "no",
            "yes" if who in server.hub.pending else "no",
        )
    return t


def _events(server: CentralizedServer) -> Panel:
    lines = [
        f"[dim]{time.strftime('%H:%M:%S', time.localtime(e.at))}[/] {e.text}"
        for e in list(server.hub.events)[-10:]
    ]
    return Panel("\n".join(lines) or "[dim]no events yet[/]", title="last events")


def render_status(server: CentralizedServer, now: float | None = None) -> RenderableType:
    """One frame of the status view."""
    now = time.time() if now is None else now
    summary = Panel(_summary(server, now), title="psyche centralized server")
    return Group(summary, _clients(server), _events(server))
