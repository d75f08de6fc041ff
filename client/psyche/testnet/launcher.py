"""The local testnet: one server and N client processes on this machine, no tmux needed.

It prepares what the run config points at (a tiny model directory and token files made locally
when missing), starts ``psyche-centralized-server run`` and N ``psyche-centralized-client train``
processes with fixed per-slot keys (a restarted client keeps its identity), follows the server's
event file to show a live status, optionally kills random clients every interval and restarts
them, stops after the run finishes (or E epochs, or a timeout), and writes the summary JSON and a
loss plot. Every child is killed on the way out, whatever happens.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from psyche.events import EventTail
from psyche.protocol.config import LLM, HubCheckpoint, ServerData
from psyche.protocol.runconfig import RunConfig, load_data_config, load_run_config
from psyche.testnet.summary import ClientTally, Summary, build_summary, plot_losses


@dataclass(frozen=True, slots=True, kw_only=True)
class TestnetOptions:
    __test__ = False  # not a pytest test class despite the name
    config_path: Path
    num_clients: int = 3
    server_port: int = 20000
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
    server_args: tuple[str, ...] = ()
    """Extra ``centralized-server run`` flags (e.g. ``--withdraw-on-disconnect false``)."""
    checkpoint_dir: Path | None = None
    """Where elected checkpointers store the model (default ``<out>/checkpoints``); a client
    joining a later epoch loads the run's last stored checkpoint from there."""


@dataclass
class _Proc:
    label: str
    popen: subprocess.Popen[bytes]
    log: IO[bytes]


@dataclass
class Testnet:
    __test__ = False  # not a pytest test class despite the name
    options: TestnetOptions
    config: RunConfig
    out: Path
    server: _Proc | None = None
    clients: dict[str, _Proc] = field(default_factory=dict)
    tallies: dict[str, ClientTally] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    """Clients killed on purpose and not to be restarted."""
    _server_tail: EventTail | None = None

    def states(self) -> list[dict[str, Any]]:
        """Every coordinator state the server has logged so far (read incrementally)."""
        if self._server_tail is None:
            self._server_tail = EventTail(self.server_events)
        self._server_tail.poll()
        return [e for e in self._server_tail.events if e.get("event") == "state"]

    @property
    def server_events(self) -> Path:
        return self.out / "server-events.jsonl"

    def client_log(self, label: str) -> Path:
        return self.out / "events" / f"{label}.jsonl"

    # --- processes ----------------------------------------------------------------------------

    def _spawn(self, label: str, args: list[str]) -> _Proc:
        log = (self.out / "logs" / f"{label}.log").open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        popen = subprocess.Popen(
            [sys.executable, "-m", "psyche.cli.main", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        return _Proc(label, popen, log)

    def start_server(self) -> None:
        o = self.options
        args = [
            "centralized-server",
            "run",
            "--state",
            str(o.config_path / "state.toml"),
            "--server-port",
            str(o.server_port),
            "--host",
            "127.0.0.1",
            "--tui",
            "false",
            "--events-file",
            str(self.server_events),
        ]
        data_toml = o.config_path / "data.toml"
        if data_toml.exists():
            args += ["--data-config", str(data_toml)]
        self.server = self._spawn("server", [*args, *o.server_args])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.server.popen.poll() is not None:
                raise RuntimeError(f"the server exited; see {self.out / 'logs' / 'server.log'}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", o.server_port), timeout=1),
            ):
                return
            time.sleep(0.3)
        raise RuntimeError("the server did not start listening within 120 s")

    def start_client(self, slot: int) -> None:
        o = self.options
        label = f"client-{slot}"
        key = self.out / "keys" / f"{label}.key"
        if not key.exists():
            key.write_bytes(os.urandom(32))
            key.chmod(0o600)
        args = [
            "centralized-client",
            "train",
            "--run-id",
            self.config.run_id or "",
            "--server-addr",
            f"127.0.0.1:{o.server_port}",
            "--identity-secret-key-path",
            str(key),
            "--device",
            o.device,
            "--micro-batch-size",
            str(o.micro_batch_size),
            "--event-log",
            str(self.client_log(label)),
            "--logs",
            "console",
            "--checkpoint-dir",
            str(o.checkpoint_dir or self.out / "checkpoints"),
        ]
        self.down.discard(label)
        self.clients[label] = self._spawn(label, args)
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
        procs = [*self.clients.values(), *([self.server] if self.server else [])]
        for p in procs:
            if p.popen.poll() is None:
                p.popen.terminate()
        deadline = time.monotonic() + 15
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait(timeout=10)
            p.log.close()

    # --- the run ------------------------------------------------------------------------------

    def summary(self) -> Summary:
        logs = {label: self.client_log(label) for label in sorted(self.tallies)}
        return build_summary(self.server_events, logs, self.tallies)

    def run(self, on_tick: Callable[[Testnet], bool | None] | None = None) -> Summary:
        """Run until the run ends, ``epochs`` epochs pass, or ``on_tick`` (called every 0.5 s)
        returns True."""
        o = self.options
        rng = random.Random(o.seed)
        self.start_server()
        for slot in range(1, o.num_clients + 1):
            self.start_client(slot)
        started = time.monotonic()
        next_kill = started + o.random_kill_interval
        try:
            while True:
                time.sleep(0.5)
                if on_tick is not None and on_tick(self):
                    break
                states = self.states()
                last = states[-1]["run_state"] if states else ""
                if last in ("Finished", "Paused"):
                    break
                if o.epochs is not None and _epochs_completed(states) >= o.epochs:
                    break
                if time.monotonic() - started > o.timeout_s:
                    raise TimeoutError(f"the run did not finish within {o.timeout_s:.0f} s")
                if self.server is not None and self.server.popen.poll() is not None:
                    raise RuntimeError("the server exited unexpectedly; see logs/server.log")
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


def _epochs_completed(states: list[dict[str, object]]) -> int:
    return sum(
        1
        for a, b in itertools.pairwise(states)
        if a["run_state"] == "Cooldown" and b["run_state"] != "Cooldown"
    )


def prepare_local_inputs(run: RunConfig, config_path: Path, log: Callable[[str], None]) -> None:
    """Create the model directory and token files a local run config points at, if missing."""
    llm = run.model
    assert isinstance(llm, LLM)
    ck = llm.checkpoint
    if isinstance(ck, HubCheckpoint) and ck.repo.revision is None:
        model_dir = Path(ck.repo.repo_id)
        looks_local = ck.repo.repo_id.startswith((".", "/", "runs/")) or model_dir.exists()
        if looks_local and not (model_dir / "config.json").exists():
            from psyche.training.presets import PRESETS, write_model_dir

            res = write_model_dir(model_dir, preset=PRESETS["tiny"], seed=0)
            log(f"created a tiny model ({res.n_params:,} parameters) in {model_dir}")
    data_toml = config_path / "data.toml"
    if isinstance(llm.data_location, ServerData) and data_toml.exists():
        dc = load_data_config(data_toml)
        data_dir = dc.resolved_dir(data_toml)
        if not data_dir.exists() or not any(data_dir.glob("*.npy")):
            from psyche.data.prepare import ByteTokenizer, prepare_corpus
            from psyche.data.synth import synth_corpus

            text = data_dir.parent / (data_dir.name + "-text")
            synth_corpus(text, 400_000, seed=0)
            prepare_corpus(
                [text],
                ByteTokenizer(),
                data_dir,
                seq_len=dc.seq_len,
                shuffle_seed=bytes(dc.shuffle_seed),
            )
            log(f"created synthetic token data in {data_dir}")


def make_testnet(options: TestnetOptions, log: Callable[[str], None] = print) -> Testnet:
    run = load_run_config(options.config_path / "state.toml", require_run_id=True)
    out = options.out_dir or Path("runs") / f"{run.run_id}-testnet"
    for sub in ("logs", "events", "keys"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for old in [*(out / "events").glob("*.jsonl"), out / "server-events.jsonl"]:
        old.unlink(missing_ok=True)
    prepare_local_inputs(run, options.config_path, log)
    return Testnet(options, run, out)


def finish(testnet: Testnet, summary: Summary) -> tuple[Path, Path]:
    import json

    path = testnet.options.summary_path or testnet.out / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    png = path.with_suffix(".png")
    plot_losses(
        summary, png, f"run {testnet.config.run_id!r}: {testnet.options.num_clients} clients"
    )
    return path, png
