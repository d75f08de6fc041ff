"""P2P identity commands: show the peer id of a key (``show-identity``,
``show-static-p2p-identity``) and make a new key file (``create-static-p2p-identity``).

A key is 32 raw bytes or 64 hex characters (``openssl rand 32 > secret.key`` makes one);
``RAW_IDENTITY_SECRET_KEY`` (hex) stands in for the file. On Solana a training client's P2P
identity is its wallet's ed25519 key (one key signs transactions and gossip); a static identity
is what a centralized client uses with ``-i``, or what an operator prepares ahead.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from psyche.cli.exit_codes import Mistake

__all__ = ["create_identity", "echo_identity"]


def echo_identity(path: str | None, flag: str) -> None:
    """Print the peer id of ``path`` (or ``RAW_IDENTITY_SECRET_KEY``). Without either, or with a
    key file that is missing, unreadable or not a key: one line and exit 2, as every command
    says a mistake in a file the user named (:mod:`psyche.cli.input_files`).

    ``flag`` says how this command takes a key file: the commands differ (an option on
    ``show-identity``, an argument on ``show-static-p2p-identity``). Unlike a client, this
    never invents a random key: a peer id nobody can reuse is not worth printing.
    """
    from psyche.cli.checks import CREATE_KEY, load_identity
    from psyche.p2p.peer_id import peer_id_for

    raw = os.environ.get("RAW_IDENTITY_SECRET_KEY")
    if not path and not (raw and raw.strip()):
        raise Mistake(
            f"no identity to show: name a key file ({flag}) or set RAW_IDENTITY_SECRET_KEY; "
            f"{CREATE_KEY} or `psyche-solana-client create-static-p2p-identity secret.key`"
        )
    click.echo(peer_id_for(load_identity(path, raw, flag).public_key()))


def create_identity(path: Path, *, force: bool) -> str:
    """Write a new random key to ``path`` (owner-only permissions) and return its peer id."""
    from psyche.p2p.peer_id import peer_id_for
    from psyche.protocol.identity import SecretKey

    if path.exists() and not force:
        raise click.ClickException(f"{path} exists; pass --force to replace it")
    key = SecretKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.to_bytes())
    return peer_id_for(key.public_key())


@click.command("show-static-p2p-identity")
@click.argument("path", required=False, envvar="IDENTITY_SECRET_KEY_PATH")
def show_static_identity_cmd(path: str | None) -> None:
    """Print the peer id of the key file PATH (or RAW_IDENTITY_SECRET_KEY)."""
    echo_identity(path, "PATH")


@click.command("create-static-p2p-identity")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace an existing file.")
def create_static_identity_cmd(path: Path, force: bool) -> None:
    """Write a new random P2P key to PATH and print its peer id."""
    click.echo(create_identity(path, force=force))
