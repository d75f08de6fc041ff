"""Env files the way a joiner writes them and ``docker run --env-file`` reads them.

Writing: one ``KEY="value"`` line per setting, values double-quoted as the user documentation's
examples are (``psyche-solana-client`` strips one pair of surrounding quotes). Reading follows
docker: each ``KEY=VALUE`` line is taken literally (no shell expansion, quotes kept), blank lines
and lines starting with ``#`` are skipped, and a bare ``KEY`` takes the launcher's own value if it
has one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["EnvFileError", "read_env_file", "write_env_file"]


class EnvFileError(ValueError):
    """A line of an env file is not ``KEY=VALUE`` (or a bare ``KEY``)."""


def write_env_file(path: Path, values: Mapping[str, str], comment: str = "") -> None:
    """Write ``values`` as quoted ``KEY="value"`` lines; the file is private (it holds a key)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    for key, value in values.items():
        if '"' in value or "\n" in value:
            raise EnvFileError(f"{key}: a value with a quote or a newline cannot be written")
        lines.append(f'{key}="{value}"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text("\n".join(lines) + "\n")


def read_env_file(path: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables ``docker run --env-file path`` would set, in file order."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not key or any(c.isspace() for c in key):
            raise EnvFileError(f"{path}:{n}: {key!r} is not a variable name")
        if sep:
            out[key] = value
        elif key in environ:
            out[key] = environ[key]
    return out
