"""What every local testnet shares: child processes, random kills, the follow loop, the summary.

A local testnet is a coordinator side (the centralized server, or a local SVM holding the
programs) and N client processes on this machine. Subclasses say how to start the coordinator side
and how to start one client; this class owns the processes (a log file each under ``logs/``),
kills random clients and restarts them, restarts clients that crash on their own, stops when the
run finishes (or after E epochs, or a timeout) and kills every child on the way out.

The coordinator's states come from one JSON-lines file of ``state`` events (the server's
``--events-file``, or the chain follower's copy of the coordinator account), so the summary and
the stop rules do not depend on which side produced them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from psyche.events import EventTail, StateEvent
from psyche.protocol.run_file import RunConfig
from psyche.testnet.failures import ChildFailed, log_error_line
from psyche.testnet.summary import ClientTally, Summary, build_summary, plot_losses

CLIENT_EXIT_GRACE_S = 20.0
"""How long a finished run's clients get to exit on their own before they are stopped."""
EXPLORER_LINGER_S = 5.0
"""How long the explorer (and the server it follows) stay up once a run has finished and its
clients have exited: the explorer polls the server about every second and its page refreshes
every 2 s, so an open page shows the end before the explorer stops with the testnet. (Clients
used to spend 4 s in the interpreter's teardown, which gave the page that time by accident.)"""

__all__ = ["LocalTestnet", "NetOptions", "Proc", "epochs_completed", "finish", "stop_processes"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NetOptions:
    """The options both testnets take (the CLI flags they share)."""

    config_path: Path
    num_clients: int = 3
    out_dir: Path | None = None
    summary_path: Path | None = None
    epochs: int | None = None
    random_kill_num: int = 0
    random_kill_interval: float = 120.0
    allowed_to_kill: tuple[int, ...] = ()
    device: str = "cpu"
    micro_batch_size: int = 2
    timeout_s: float = 3600.0
    seed: int = 0
    checkpoint_dir: Path | None = None
    """Where the clients store the model at each cooldown (default ``<out>/checkpoints``); a
    client joining a later epoch loads the run's last reported checkpoint from there."""
    log: str | None = None
    """``--log``: the level spec every child logs at (``warn,psyche=debug``)."""
    write_log: bool = False
    """``--write-log``: each client also writes its log to ``<out>/write-logs/<label>.log``."""
    hf_token: str | None = None
    wandb_project: str | None = None
    wandb_group: str | None = None
    wandb_entity: str | None = None
    eval_tasks: str | None = None
    optim_stats: int | None = None
    write_distro_data: Path | None = None
    """``--write-distro-data``: each client writes every payload to ``<dir>/<label>/``."""
    delayed_clients: tuple[int, ...] = ()
    """Clients not started at launch: the caller starts them (``start_client``) when it wants a
    joiner, e.g. from ``run``'s ``on_tick``."""
    explorer_port: int | None = None
    """``--explorer PORT``: run ``psyche explorer serve`` on this port (0: a free one) following
    the run, its database at ``<out>/explorer.sqlite``; its URL is printed once it listens."""
    first_client_checkpoint: str | None = None
    """``--first-client-checkpoint``: the Hub repo the run's model is loaded from (replaces the
    config's checkpoint; see :func:`psyche.testnet.inputs.state_with_checkpoint`)."""

    def __post_init__(self) -> None:
        # Every path is absolute from here on (the CLI parses them so already): the children
        # get these paths, and one may run in another working directory (issue 37).
        for name in PATH_OPTIONS:
            value = getattr(self, name)
            if value is not None and not value.is_absolute():
                object.__setattr__(self, name, Path(os.path.abspath(value)))


PATH_OPTIONS = ("config_path", "out_dir", "summary_path", "checkpoint_dir", "write_distro_data")
"""The :class:`NetOptions` fields that are paths."""


@dataclass
class Proc:
    label: str
    popen: subprocess.Popen[bytes]
    log: IO[bytes]
    offset: int = 0
    """Where this run of the child began in its log (restarts append to the same file)."""

    def failed(self, what: str) -> ChildFailed:
        """``what`` (``the server exited``) as the error that ends the testnet: the child's exit
        code and its own last error line, and where its log is."""
        code = self.popen.poll()
        path = Path(self.log.name)
        status = f" (exit {code})" if code is not None and code >= 0 else ""
        return ChildFailed(
            f"{what}{status}; see {path}", code=code, detail=log_error_line(path, self.offset)
        )


@dataclass
class LocalTestnet:
    """The shared part; subclasses implement the four hooks at the end of the class."""

    options: NetOptions
    config: RunConfig
    out: Path
    clients: dict[str, Proc] = field(default_factory=dict)
    tallies: dict[str, ClientTally] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    """Clients killed on purpose and not to be restarted."""
    _tail: EventTail | None = None
    state_override: Path | None = None
    """The run config actually used when the flags changed it (``--first-client-checkpoint``)."""
    explorer: Proc | None = None
    explorer_url: str | None = None

    @property
    def state_toml(self) -> Path:
        return self.state_override or self.options.config_path / "state.toml"

    def states(self) -> list[StateEvent]:
        """Every coordinator state logged so far (read incrementally)."""
        if self._tail is None:
            self._tail = EventTail(self.states_file)
        self._tail.poll()
        return [e for e in self._tail.events if isinstance(e, StateEvent)]

    def client_log(self, label: str) -> Path:
        return self.out / "events" / f"{label}.jsonl"

    def client_settings(self, label: str) -> dict[str, str]:
        """The shared testnet flags as the environment twins of the client's own flags (both
        testnets hand their clients these: one as its environment, one in its .env file)."""
        o = self.options
        out: dict[str, str] = {}
        if o.log:
            out["PSYCHE_LOG"] = o.log
        if o.write_log:
            out["WRITE_LOG"] = str((self.out / "write-logs" / f"{label}.log").resolve())
        if o.hf_token:
            out["HF_TOKEN"] = o.hf_token
        if o.wandb_project:
            out["WANDB_PROJECT"] = o.wandb_project
            out["WANDB_RUN"] = f"{self.config.run_id or 'run'}-{label}"
            # W&B keeps its run directories (offline runs included) under the testnet's output.
            out["WANDB_DIR"] = str(self.out.resolve())
            if o.wandb_group:
                out["WANDB_GROUP"] = o.wandb_group
            if o.wandb_entity:
                out["WANDB_ENTITY"] = o.wandb_entity
        if o.eval_tasks:
            out["EVAL_TASKS"] = o.eval_tasks
        if o.optim_stats:
            out["OPTIM_STATS_STEPS"] = str(o.optim_stats)
        if o.write_distro_data is not None:
            out["WRITE_GRADIENTS_DIR"] = str((o.write_distro_data / label).resolve())
        return out

    # --- processes ----------------------------------------------------------------------------

    def spawn(
        self,
        label: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Proc:
        """Start ``argv`` with its output in ``logs/<label>.log`` (appended: restarts share it)."""
        log = (self.out / "logs" / f"{label}.log").open("ab")
        offset = log.seek(0, os.SEEK_END)
        base = dict(os.environ) if env is None else dict(env)
        # Every child is one of many sharing the cores: one BLAS thread each keeps them fair.
        base.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
        popen = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, env=base, cwd=cwd
        )
        return Proc(label, popen, log, offset)

    def start_client(self, slot: int) -> None:
        label = f"client-{slot}"
        self.down.discard(label)
        self.clients[label] = self.client_process(slot, label)
        tally = self.tallies.setdefault(label, ClientTally())
        tally.joins += 1
        tally.started_at.append(round(time.time(), 3))

    def kill_client(self, label: str, *, restart: bool = False) -> None:
        """SIGKILL a client (a crash, not a clean exit); restart it at once if asked."""
        proc = self.clients[label]
        with contextlib.suppress(ProcessLookupError):
            proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(timeout=30)
        proc.log.close()
        self.tallies[label].kills += 1
        self.tallies[label].killed_at.append(round(time.time(), 3))
        if restart:
            self.start_client(int(label.split("-")[1]))
        else:
            self.down.add(label)

    def stop_all(self) -> None:
        """Stop the clients, then the coordinator side (idempotent)."""
        stop_processes([*self.clients.values()])
        try:
            self.stop_coordinator_side()
        finally:
            explorer = [self.explorer] if self.explorer is not None else []
            stop_processes([*explorer, *self.infrastructure()])

    def start_explorer(self, port: int, timeout_s: float = 60.0) -> str:
        """``psyche explorer serve`` following this testnet's run; returns (and prints) its URL."""
        ready = self.out / "explorer-url.txt"
        ready.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "psyche.cli.main", "explorer", "serve"]
        argv += ["--database", str(self.out / "explorer.sqlite"), "--port", str(port)]
        argv += ["--ready-file", str(ready), *self.explorer_sources()]
        self.explorer = self.spawn("explorer", argv)
        deadline = time.monotonic() + timeout_s
        while not ready.exists() or not ready.read_text().strip():
            if self.explorer.popen.poll() is not None:
                raise RuntimeError(f"the explorer exited; see {self.out / 'logs' / 'explorer.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the explorer did not listen within {timeout_s:.0f} s")
            time.sleep(0.2)
        self.explorer_url = ready.read_text().strip()
        print(f"explorer: {self.explorer_url} (the run, live)", flush=True)
        return self.explorer_url

    # --- the run ------------------------------------------------------------------------------

    def summary(self) -> Summary:
        logs = {label: self.client_log(label) for label in sorted(self.tallies)}
        return build_summary(self.states_file, logs, self.tallies)

    def run(self, on_tick: Callable[[Any], bool | None] | None = None) -> Summary:
        """Run until the run ends, ``epochs`` epochs pass, or ``on_tick`` (called every 0.5 s)
        returns True."""
        o = self.options
        rng = random.Random(o.seed)
        try:
            self.start_coordinator_side()
            if o.explorer_port is not None:
                try:
                    self.start_explorer(o.explorer_port)
                except RuntimeError as e:
                    # Watching is optional: a taken port must not stop the training.
                    print(f"explorer not started: {e}", flush=True)
            for slot in range(1, o.num_clients + 1):
                if slot not in o.delayed_clients:
                    self.start_client(slot)
            started = time.monotonic()
            next_kill = started + o.random_kill_interval
            while True:
                time.sleep(0.5)
                if on_tick is not None and on_tick(self):
                    break
                states = self.states()
                last = states[-1].run_state if states else ""
                if last == "Finished":
                    self._let_clients_exit(CLIENT_EXIT_GRACE_S)
                    if self.explorer is not None:
                        time.sleep(EXPLORER_LINGER_S)
                    break
                if last == "Paused":
                    break
                if o.epochs is not None and epochs_completed(states) >= o.epochs:
                    break
                if time.monotonic() - started > o.timeout_s:
                    raise TimeoutError(f"the run did not finish within {o.timeout_s:.0f} s")
                self.check_coordinator_side()
                if o.random_kill_num and time.monotonic() >= next_kill:
                    next_kill = time.monotonic() + o.random_kill_interval
                    allowed = [
                        f"client-{i}" for i in (o.allowed_to_kill or range(1, o.num_clients + 1))
                    ]
                    for label in rng.sample(allowed, min(o.random_kill_num, len(allowed))):
                        self.kill_client(label, restart=True)
                for label, proc in list(self.clients.items()):
                    # A client that crashed (not killed by us) is restarted too.
                    if label not in self.down and proc.popen.poll() not in (None, 0):
                        proc.log.close()
                        self.start_client(int(label.split("-")[1]))
        finally:
            self.stop_all()
        return self.summary()

    def _let_clients_exit(self, timeout_s: float) -> None:
        """A finished run's clients exit by themselves (after their last upload and eval): give
        them that before anything is stopped, so no client is cut short at the end."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(
            p.popen.poll() is None for p in self.clients.values()
        ):
            time.sleep(0.2)

    # --- hooks --------------------------------------------------------------------------------

    @property
    def states_file(self) -> Path:
        """The JSON-lines file of ``state`` events the summary is built from."""
        raise NotImplementedError

    def start_coordinator_side(self) -> None:
        """Start what the clients connect to and return once they can."""
        raise NotImplementedError

    def check_coordinator_side(self) -> None:
        """Raise RuntimeError if the coordinator side died."""

    def stop_coordinator_side(self) -> None:
        """Called once the clients are stopped and before the coordinator side's processes are:
        stop in-process helpers, read what only a running coordinator side can tell."""

    def infrastructure(self) -> list[Proc]:
        """The coordinator side's processes, stopped after the clients."""
        return []

    def client_process(self, slot: int, label: str) -> Proc:
        raise NotImplementedError

    def explorer_sources(self) -> list[str]:
        """The ``psyche explorer serve`` flags that follow this run."""
        raise NotImplementedError


def stop_processes(procs: Sequence[Proc], grace_s: float = 15.0) -> None:
    """SIGTERM, wait up to ``grace_s`` for them all, then SIGKILL the rest."""
    for p in procs:
        if p.popen.poll() is None:
            p.popen.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        if p.popen.poll() is None:
            p.popen.kill()
            p.popen.wait(timeout=10)
        p.log.close()


def epochs_completed(states: list[StateEvent]) -> int:
    return sum(
        1
        for a, b in itertools.pairwise(states)
        if a.run_state == "Cooldown" and b.run_state != "Cooldown"
    )


def finish(testnet: LocalTestnet, summary: Summary) -> tuple[Path, Path]:
    """Write ``summary.json`` (or ``--summary``) and the loss plot beside it."""
    path = testnet.options.summary_path or testnet.out / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    png = path.with_suffix(".png")
    plot_losses(
        summary, png, f"run {testnet.config.run_id!r}: {testnet.options.num_clients} clients"
    )
    return path, png
