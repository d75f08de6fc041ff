"""Files the user names on the command line, and what a mistake in one looks like.

One rule for every command (README, "Troubleshooting"): a file named by a flag (a key, a config,
a state or data file, a model folder) that is missing, unreadable (a directory where a file
belongs, no permission) or malformed (not TOML, not JSON, not UTF-8, not a key) ends the command
with one line, ``error: FLAG PATH: REASON``, and exit 2 (:class:`~psyche.cli.exit_codes.Mistake`):
the user changes the path or the file and runs again. A well-formed config that breaks the
protocol's rules is the command's own ``invalid config: …``, exit 1.

Options declared with :class:`InputFile` are checked where click parses them, before anything
starts (no server, no chain, no torch). Key files are read where the key is chosen, because an
environment variable may win over the flag (``RAW_IDENTITY_SECRET_KEY``,
``RAW_WALLET_PRIVATE_KEY``); their loaders raise the same one line (:func:`file_mistake`).

Light on purpose, like :mod:`psyche.cli.exit_codes`: commands import it before parsing.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Literal

import click
from click.core import ParameterSource

from psyche.cli.exit_codes import Mistake
from psyche.cli.paths import absolute

__all__ = ["InputFile", "check_file", "check_folder", "file_mistake", "flag_name"]

Parse = Literal["toml", "json"]
_PARSE_BY_SUFFIX: dict[str, Parse] = {".toml": "toml", ".json": "json"}


def flag_name(param: click.Parameter | None, ctx: click.Context | None) -> str:
    """How the user named ``param``: ``-i/--identity-secret-key-path`` (an option), ``PATH`` (an
    argument), with the environment variable added when the value came from there
    (``--state/PSYCHE_STATE``)."""
    if param is None:
        return "the file"
    if not isinstance(param, click.Option):
        return param.human_readable_name
    name = "/".join(param.opts)
    from_env = (
        ctx is not None
        and param.name is not None
        and ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT
    )
    if from_env and param.envvar:
        envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
        found = [v for v in envvars if os.environ.get(v)]
        name += f"/{found[0] if found else envvars[0]}"
    return name


def file_mistake(flag: str, path: str | os.PathLike[str], reason: str) -> Mistake:
    """The one line for a file the user named: ``FLAG PATH: REASON``, exit 2."""
    return Mistake(f"{flag} {os.fspath(path)}: {reason}")


def _strerror(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


def _malformed(data: bytes, parse: Parse) -> str | None:
    """Why ``data`` is not a well-formed ``parse`` document, or None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
    try:
        if parse == "toml":
            import tomllib

            tomllib.loads(text)
        else:
            import json

            json.loads(text)
    # ValueError: TOMLDecodeError and JSONDecodeError, and an integer past Python's digit limit.
    except (ValueError, RecursionError) as e:
        return f"malformed {parse.upper()}: {e}"
    return None


def check_file(path: str, flag: str, parse: Parse | None = None) -> None:
    """End the command (:func:`file_mistake`) unless ``path`` is a file this process can read,
    and, with ``parse``, a well-formed TOML or JSON document."""
    try:
        with open(path, "rb") as f:
            data = f.read() if parse is not None else f.read(0)
    except OSError as e:
        raise file_mistake(flag, path, _strerror(e)) from None
    if parse is not None and (why := _malformed(data, parse)) is not None:
        raise file_mistake(flag, path, why)


def check_folder(path: str, flag: str) -> None:
    """End the command unless ``path`` is a folder this process can list."""
    try:
        os.listdir(path)
    except OSError as e:
        raise file_mistake(flag, path, _strerror(e)) from None


class InputFile(click.Path):
    """A file (or folder) the command reads, checked where it is parsed: :func:`check_file` on a
    file; on a folder (``file_okay=False``), that it can be listed and that each file of
    ``inside`` (and each of ``inside_if_present`` that is there) is readable and well-formed, as
    its suffix says (``.toml``, ``.json``). ``absolute``: the value is an absolute
    :class:`~pathlib.Path` (:func:`psyche.cli.paths.absolute`). The help shows ``FILE``,
    ``DIRECTORY`` or ``PATH``, as ``click.Path`` does."""

    def __init__(
        self,
        *,
        parse: Parse | None = None,
        inside: tuple[str, ...] = (),
        inside_if_present: tuple[str, ...] = (),
        absolute: bool = False,
        file_okay: bool = True,
        dir_okay: bool | None = None,
        path_type: type[Any] | None = None,
    ) -> None:
        super().__init__(
            file_okay=file_okay,
            dir_okay=not file_okay if dir_okay is None else dir_okay,
            path_type=Path if absolute else path_type,
        )
        self.parse = parse
        self.inside = inside
        self.inside_if_present = inside_if_present
        self.absolute = absolute

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = os.fsdecode(value)
        flag = flag_name(param, ctx)
        if not self.file_okay:
            self._check_folder(path, flag)
        elif not self.dir_okay:
            check_file(path, flag, self.parse)
        elif not os.path.isdir(path):  # either will do: a file is read, a folder listed
            check_file(path, flag)
        else:
            check_folder(path, flag)
        checked = super().convert(value, param, ctx)
        return absolute(os.fsdecode(checked)) if self.absolute else checked

    def _check_folder(self, path: str, flag: str) -> None:
        if os.path.exists(path) and not os.path.isdir(path):
            raise file_mistake(flag, path, os.strerror(errno.ENOTDIR))
        check_folder(path, flag)
        for name in (*self.inside, *self.inside_if_present):
            inner = os.path.join(path, name)
            if name in self.inside or os.path.lexists(inner):
                check_file(inner, flag, _PARSE_BY_SUFFIX.get(Path(name).suffix))
