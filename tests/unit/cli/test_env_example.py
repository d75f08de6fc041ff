"""Every environment twin a CLI flag declares is listed in .env.example."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click

from psyche.cli.main import cli
from psyche.cli.solana_testnet import solana_testnet

ROOT = Path(__file__).resolve().parents[3]


def _listed() -> set[str]:
    # A variable may be listed commented out (PSYCHE_DEVICE: it must not override the image's).
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^#?\s*([A-Z0-9_]+)=", text, re.M))


def test_every_envvar_is_documented() -> None:
    declared: set[str] = set()
    for path in (ROOT / "client" / "psyche" / "cli").glob("*.py"):
        text = path.read_text()
        declared |= set(re.findall(r'envvar="([A-Z0-9_]+)"', text))
        # envvar=["A", "B"]: every name in the list.
        for names in re.findall(r"envvar=\[([^\]]*)\]", text):
            declared |= set(re.findall(r'"([A-Z0-9_]+)"', names))
    assert declared, "no envvars found; did the CLI move?"
    assert {"BIND_P2P_HOST", "BIND_P2P_INTERFACE"} <= declared  # the list form is read
    listed = _listed()
    assert declared <= listed, f"missing from .env.example: {sorted(declared - listed)}"


def _params(cmd: click.Command) -> Iterator[click.Parameter]:
    yield from cmd.params
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            yield from _params(sub)


def test_every_envvar_of_every_command_is_documented() -> None:
    """The same from the commands themselves, so a name built in code is not missed."""
    declared: set[str] = set()
    for group in (cli, solana_testnet):
        for param in _params(group):
            envvar = param.envvar
            if isinstance(envvar, str):
                declared.add(envvar)
            elif envvar:
                declared.update(envvar)
    assert {"RUN_ID", "DATA_PARALLELISM", "BIND_P2P_INTERFACE", "SVM_RPC_PORT"} <= declared
    listed = _listed()
    assert declared <= listed, f"missing from .env.example: {sorted(declared - listed)}"
