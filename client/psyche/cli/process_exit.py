"""How a ``psyche`` process ends: at once, once the command has closed what it owns.

A client's process, at its end, spent 3.5–4.5 s of CPU in the interpreter's teardown (2026-12-07,
``py-spy dump`` of clients past "run finished": ``gc_collect_main``, no Python frame left), and
an idle interpreter that had only imported the client's modules 1.7 s (torch, transformers and
what they pull in: sympy, torch._dynamo, triton). A restarted container waited for it, and so
did every test that runs clients. The commands close what they own themselves (the client: its
P2P host and blob directory, data-parallel workers, the backend's connection, the event log and
its metric sinks, W&B finished; the others work in ``with`` blocks), so all the teardown still
did was free memory the kernel frees anyway. What must still happen is done here: the log
handlers and the standard streams are flushed.

Only the processes' entry points (the console scripts, ``python -m psyche.cli.main``) end this
way; a command invoked in-process (click's test runner) returns to its caller as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import click


def exit_now(code: int) -> NoReturn:
    """Flush the logs and the standard streams, then end the process with ``code`` without
    the interpreter's teardown (atexit handlers included: the command closed what it owns)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (``psyche … | head``) is no error
            stream.flush()
    os._exit(code)


class ProcessMain:
    """The entry point of a process that runs ``command``: click's standalone ``main``, then
    :func:`exit_now` with the code it exits with. An exception that escapes click (a bug) is
    left alone: the interpreter prints its traceback and tears down as usual."""

    def __init__(self, command: click.Command) -> None:
        self.command = command

    def __call__(self, args: Sequence[str] | None = None, prog_name: str | None = None) -> NoReturn:
        try:
            self.command.main(args, prog_name)
            code: object = 0
        except SystemExit as e:
            code = e.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)  # what the interpreter does with sys.exit("text")
            code = 1
        exit_now(code)
