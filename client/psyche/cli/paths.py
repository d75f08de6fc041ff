"""Paths a command receives, made absolute once where the command starts.

A command that starts other processes hands them paths (a testnet's output folder, a key file, a
ready file); a child started with another working directory, or a step that changes it, would read
a relative path against the wrong folder (issue 37: the Solana testnet's run creator ran in its
keys folder and could not find ``runs/…/keys/creator.json``). So every path option is absolute
from the moment it is parsed, and no child depends on the working directory it inherits.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

__all__ = ["AbsolutePath", "absolute", "absolute_entries"]


def absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` against the current directory, ``~`` expanded; symlinks are kept as given (a
    user's ``runs -> /data/runs`` stays what they named)."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


class AbsolutePath(click.Path):
    """``click.Path`` whose value is an absolute :class:`~pathlib.Path`. The checks (exists,
    file or directory) and their messages are click's, on the path as the user typed it."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("path_type", Path)
        super().__init__(**kwargs)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        checked = super().convert(value, param, ctx)
        if checked == "-" or checked == b"-":
            return checked  # click's stdin/stdout marker
        return absolute(os.fsdecode(checked))


def absolute_entries(value: str | None) -> str | None:
    """A comma-separated list of names and paths (``--eval-tasks``) with each entry that names
    an existing file or folder made absolute; names (``hellaswag``) stay as they are."""
    if not value:
        return value
    entries = [e.strip() for e in value.split(",")]
    return ",".join(str(absolute(e)) if e and os.path.exists(e) else e for e in entries)
