"""Centralized client (psyche-centralized-client): the training daemon against a TCP coordinator."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any

import click

from psyche.cli.checks import (
    KEY_FLAG,
    host_port,
    load_identity,
    start_logging,
    usable_device,
)
from psyche.cli.daemon_options import (
    daemon_options,
    take_checkpoint_and_sharing,
    take_training_flags,
)
from psyche.cli.exit_codes import EXIT_INTERRUPTED, CliGroup
from psyche.cli.help_markdown import add_print_all_help
from psyche.cli.process_exit import ProcessMain


@click.group(cls=CliGroup)
def client() -> None:
    """Centralized client (psyche-centralized-client): the training daemon against a TCP
    coordinator."""


@client.command("show-identity")
@click.option(
    "-i",
    "--identity-secret-key-path",
    envvar="IDENTITY_SECRET_KEY_PATH",
    default=None,
    help="Key file (create one with `openssl rand 32 > secret.key`); or RAW_IDENTITY_SECRET_KEY.",
)
def show_identity_cmd(identity_secret_key_path: str | None) -> None:
    """Print the P2P peer id of the key this client would use."""
    from psyche.cli.identity import echo_identity

    echo_identity(identity_secret_key_path, KEY_FLAG)


@client.command("train")
@click.option("--run-id", required=True, envvar="RUN_ID", help="Run to join.")
@click.option(
    "--server-addr",
    required=True,
    envvar="SERVER_ADDR",
    callback=host_port,
    help="host:port of the server.",
)
@click.option(
    "-i",
    "--identity-secret-key-path",
    envvar="IDENTITY_SECRET_KEY_PATH",
    default=None,
    help="ed25519 key file (32 raw bytes or 64 hex chars); RAW_IDENTITY_SECRET_KEY wins; "
    "a random key when both are absent.",
)
@daemon_options()
def train(
    run_id: str,
    server_addr: str,
    identity_secret_key_path: str | None,
    logs: str,
    **kw: Any,
) -> None:
    """Join RUN_ID at SERVER_ADDR and train until the run is finished."""
    raw_key = os.environ.get("RAW_IDENTITY_SECRET_KEY")
    key = load_identity(identity_secret_key_path, raw_key)
    checkpoint, sharing = take_checkpoint_and_sharing(kw)
    flags = take_training_flags(kw)
    usable_device(kw["device"])
    start_logging(logs, kw.pop("write_log"))
    from psyche.cli.client_process import ClientOptions, run_client

    options = ClientOptions(
        run_id=run_id,
        coordinator_addr=server_addr,
        key_path=identity_secret_key_path,
        raw_key=raw_key,
        p2p_host=kw["bind_p2p_host"],
        p2p_port=kw["bind_p2p_port"],
        p2p_blob_dir=kw["p2p_blob_dir"],
        micro_batch_size=kw["micro_batch_size"],
        checkpoint=checkpoint,
        sharing=sharing,
        device=kw["device"],
        event_log=kw["event_log"],
        training=flags,
    )
    try:
        code = asyncio.run(run_client(options, key=key))
    except KeyboardInterrupt:
        logging.getLogger("psyche").warning("interrupted")
        code = EXIT_INTERRUPTED
    sys.exit(code)


add_print_all_help(client, "psyche-centralized-client")

main = ProcessMain(client)
"""The ``psyche-centralized-client`` process."""
