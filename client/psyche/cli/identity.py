"""P2P identity commands: show the peer id of a key (``show-identity``,
``show-static-p2p-identity``) and make a new key file (``create-static-p2p-identity``).

A key is 32 raw bytes or 64 hex characters (``openssl rand 32 > secret.key`` makes one);
``RAW_IDENTITY_SECRET_KEY`` (hex) stands in for the file. On Solana a training client's P2P
identity is its wallet's ed25519 key (one key signs transactions and gossip); a static identity
is what a centralized client uses with ``-i``, or what an operator prepares ahead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

__all__ = ["create_identity", "echo_identity"]


def echo_identity(path: str | None, give_path: str) -> None:
    """Print the peer id of ``path`` (or ``RAW_IDENTITY_SECRET_KEY``); a clear error otherwise.

    ``give_path`` says how this command takes a key file: the commands differ (an option on
    ``show-identity``, an argument on ``show-static-p2p-identity``).
    """
    from psyche.p2p.peer_id import show_identity

    try:
        click.echo(show_identity(path, os.environ))
    except (ValueError, OSError) as e:
        click.echo(f"error: {e}", err=True)
        if not path:
            click.echo(f"give a key file {give_path}", err=True)
        click.echo(
            "create a key with `psyche-solana-client create-static-p2p-identity secret.key` or "
            "`openssl rand 32 > secret.key`",
            err=True,
        )
        sys.exit(1)


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
    echo_identity(path, "as PATH (or IDENTITY_SECRET_KEY_PATH)")


@click.command("create-static-p2p-identity")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace an existing file.")
def create_static_identity_cmd(path: Path, force: bool) -> None:
    """Write a new random P2P key to PATH and print its peer id."""
    click.echo(create_identity(path, force=force))
