"""The centralized local testnet: one server and N client processes on this machine, no tmux.

It prepares what the run config points at (a tiny model directory and token files made locally
when missing), starts ``psyche-centralized-server run`` and N ``psyche-centralized-client train``
processes with fixed per-slot keys (a restarted client keeps its identity), follows the server's
event file to show a live status, optionally kills random clients every interval and restarts
them, stops after the run finishes (or E epochs, or a timeout), and writes the summary JSON and a
loss plot. Every child is killed on the way out, whatever happens. The process handling and the
follow loop are shared with the Solana testnet (:mod:`psyche.testnet.base`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from psyche.protocol.run_file import load_run_config
from psyche.testnet.base import LocalTestnet, NetOptions, Proc, epochs_completed, finish
from psyche.testnet.inputs import prepare_local_inputs, state_with_checkpoint
from psyche.testnet.processes import free_port

__all__ = [
    "Testnet",
    "TestnetOptions",
    "epochs_completed",
    "finish",
    "make_testnet",
    "prepare_local_inputs",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TestnetOptions(NetOptions):
    __test__ = False  # not a pytest test class despite the name
    server_port: int = 0
    """0: a free port, chosen when the testnet is made."""
    server_args: tuple[str, ...] = ()
    """Extra ``centralized-server run`` flags (e.g. ``--withdraw-on-disconnect false``)."""


@dataclass
class Testnet(LocalTestnet):
    __test__ = False  # not a pytest test class despite the name
    server: Proc | None = None
    status_port: int | None = None
    """The server's ``--status-port`` (for the explorer), when ``--explorer`` is given."""

    @property
    def server_events(self) -> Path:
        return self.out / "server-events.jsonl"

    @property
    def states_file(self) -> Path:
        return self.server_events

    def _spawn(self, label: str, args: list[str]) -> Proc:
        """``psyche ARGS`` as process ``label``; a client gets the shared testnet flags in its
        environment (:meth:`client_settings`), the server the log levels. Tests replace this to
        run a misbehaving client in one slot."""
        o = self.options
        extra = {"PSYCHE_LOG": o.log} if label == "server" and o.log else {}
        if label != "server":
            extra = self.client_settings(label)
        argv = [sys.executable, "-m", "psyche.cli.main", *args]
        return self.spawn(label, argv, env={**os.environ, **extra})

    def start_server(self) -> None:
        o = self.options
        assert isinstance(o, TestnetOptions)
        args = [
            "centralized-server",
            "run",
            "--state",
            str(self.state_toml),
            "--server-port",
            str(o.server_port),
            "--host",
            "127.0.0.1",
            "--tui",
            "false",
            "--events-file",
            str(self.server_events),
        ]
        if o.explorer_port is not None:
            self.status_port = free_port()
            args += ["--status-port", str(self.status_port)]
        data_toml = o.config_path / "data.toml"
        if data_toml.exists():
            args += ["--data-config", str(data_toml)]
        self.server = self._spawn("server", [*args, *o.server_args])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.server.popen.poll() is not None:
                raise self.server.failed("the server exited")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", o.server_port), timeout=1),
            ):
                return
            time.sleep(0.3)
        raise RuntimeError("the server did not start listening within 120 s")

    # --- LocalTestnet hooks -------------------------------------------------------------------

    def start_coordinator_side(self) -> None:
        self.start_server()

    def check_coordinator_side(self) -> None:
        if self.server is not None and self.server.popen.poll() is not None:
            raise self.server.failed("the server exited unexpectedly")

    def infrastructure(self) -> list[Proc]:
        return [self.server] if self.server is not None else []

    def explorer_sources(self) -> list[str]:
        return ["--centralized", f"http://127.0.0.1:{self.status_port}"]

    def client_process(self, slot: int, label: str) -> Proc:
        o = self.options
        assert isinstance(o, TestnetOptions)
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
            # The clients' default is every interface; a local testnet stays on loopback.
            "--bind-p2p-host",
            "127.0.0.1",
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
        return self._spawn(label, args)


def make_testnet(options: TestnetOptions, log: Callable[[str], None] = print) -> Testnet:
    state = options.config_path / "state.toml"
    run = load_run_config(state, require_run_id=True)
    # The default, like every path the launcher hands its children, is absolute.
    out = options.out_dir or Path.cwd() / "runs" / f"{run.run_id}-testnet"
    for sub in ("logs", "events", "keys"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for old in [*(out / "events").glob("*.jsonl"), out / "server-events.jsonl"]:
        old.unlink(missing_ok=True)
    override = None
    if options.first_client_checkpoint:
        override = state_with_checkpoint(state, options.first_client_checkpoint, out / "config")
        run = load_run_config(override, require_run_id=True)
    prepare_local_inputs(run, options.config_path, log)
    if options.server_port == 0:
        options = dataclasses.replace(options, server_port=free_port())
    return Testnet(options, run, out, state_override=override)
