"""The exit codes of every entry point, in one place (README, "Troubleshooting"; docs/docker.md).

The image's entry point (docker/entrypoint.sh) restarts a client only after a code that restarting
can cure: a configuration the user must change (2) or a version the image lacks (10) ends it.

Light on purpose: commands import it before parsing, so nothing heavy may come in with it.
"""

from __future__ import annotations

import errno
import sys
from typing import NoReturn

import click

__all__ = [
    "EXIT_CONFIG",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_LEFT_RUN",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_VERSION_MISMATCH",
    "CliGroup",
    "Mistake",
    "fail",
    "os_error_line",
]

EXIT_OK = 0
EXIT_ERROR = 1
"""A failure at run time that may pass (the coordinator unreachable after every retry, a
transaction the cluster did not confirm, a crash)."""
EXIT_CONFIG = 2
"""The user must change something: a bad flag or value (click's usage errors use 2 as well), a
key that is not a key, a run that does not exist, a device that is not there, a join the
authorizer has not granted. Never restarted."""
EXIT_LEFT_RUN = 3
"""A Solana client the coordinator withdrew (halted run, not selected, unhealthy); restarting
joins the next epoch. Equal to psyche.backends.solana.backend.EXIT_LEFT_RUN."""
EXIT_VERSION_MISMATCH = 10
"""The run requires another client version. Equal to
psyche.backends.solana.backend.EXIT_VERSION_MISMATCH."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): 128 + 2."""
EXIT_TERMINATED = 143
"""SIGTERM (``docker stop``, a supervisor): the client shut down cleanly, as 128 + 15 says."""


def fail(message: str, code: int = EXIT_CONFIG) -> NoReturn:
    """End the command with one line, ``error: MESSAGE``, on stderr, and ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class Mistake(click.ClickException):
    """A mistake the user corrects and runs again, raised anywhere in a command, a parameter's
    type or callback included: one line, ``error: MESSAGE``, on stderr, and exit 2 (click's
    own usage errors print their usage first; this is for a message that says it all, such as
    a file the user named that is missing, unreadable or malformed:
    :mod:`psyche.cli.input_files`)."""

    exit_code = EXIT_CONFIG

    def show(self, file: object = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


_PATH_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def os_error_line(e: OSError) -> str:
    """An ``OSError`` as one line: the file (when it names one) and the system's reason."""
    reason = e.strerror or str(e) or type(e).__name__
    return f"{e.filename}: {reason}" if e.filename else reason


class CliGroup(click.Group):
    """The group class of every entry point: a file-system error that reaches it (a path the
    user gave that is missing, unwritable, or too long) ends the command with one line and
    exit 2; any other ``OSError`` (a refused connection, a full disk) with one line and exit 1.
    Everything else is left alone: a bug still shows its traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OSError as e:
            path_error = isinstance(e, _PATH_ERRORS) or e.errno == errno.ENAMETOOLONG
            fail(os_error_line(e), EXIT_CONFIG if path_error else EXIT_ERROR)
