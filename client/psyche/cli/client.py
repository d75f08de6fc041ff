"""Centralized client (psyche-centralized-client): the training daemon against a TCP coordinator."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import click

from psyche.cli.logs import setup_logging


@click.group()
def client() -> None:
    """Centralized client (psyche-centralized-client): the training daemon against a TCP
    coordinator."""


@client.command("show-identity")
@click.option("--identity-secret-key-path", envvar="IDENTITY_SECRET_KEY_PATH", default=None)
def show_identity_cmd(identity_secret_key_path: str | None) -> None:
    """Print the P2P peer id of the key this client would use."""
    from psyche.p2p.identity import show_identity

    click.echo(show_identity(identity_secret_key_path, os.environ))


@client.command("train")
@click.option("--run-id", required=True, envvar="RUN_ID", help="Run to join.")
@click.option("--server-addr", required=True, envvar="SERVER_ADDR", help="host:port of the server.")
@click.option(
    "--identity-secret-key-path",
    envvar="IDENTITY_SECRET_KEY_PATH",
    default=None,
    help="ed25519 key file (32 raw bytes or 64 hex chars); RAW_IDENTITY_SECRET_KEY wins; "
    "a random key when both are absent.",
)
@click.option("--bind-p2p-port", default=0, show_default=True, envvar="BIND_P2P_PORT")
@click.option("--bind-p2p-host", default="127.0.0.1", show_default=True, envvar="BIND_P2P_HOST")
@click.option("--micro-batch-size", default=2, show_default=True, envvar="MICRO_BATCH_SIZE")
@click.option(
    "--checkpoint-dir",
    default=None,
    envvar="CHECKPOINT_DIR",
    help="Elected checkpointers save {dir}/{run_id}-step{N}/ (Hugging Face format) at cooldown.",
)
@click.option(
    "--keep-steps",
    default=3,
    show_default=True,
    envvar="KEEP_STEPS",
    help="Newest local checkpoints kept per run (0 keeps all).",
)
@click.option(
    "--hub-repo",
    default=None,
    envvar="HUB_REPO",
    help="Also upload each checkpoint to this Hugging Face repo (needs HF_TOKEN and "
    "--checkpoint-dir) and report the commit to the coordinator.",
)
@click.option(
    "--max-concurrent-parameter-requests",
    default=8,
    show_default=True,
    envvar="MAX_CONCURRENT_PARAMETER_REQUESTS",
    help="Parameter pieces requested from peers at once when joining a running run.",
)
@click.option(
    "--parameter-request-timeout",
    default=30.0,
    show_default=True,
    envvar="PARAMETER_REQUEST_TIMEOUT",
    help="Seconds before a parameter request to one peer is retried on another.",
)
@click.option("--device", default="auto", show_default=True, envvar="PSYCHE_DEVICE")
@click.option(
    "--logs",
    type=click.Choice(["console", "json", "tui"]),
    default="console",
    show_default=True,
    envvar="LOGS",
)
@click.option("--event-log", default=None, envvar="EVENT_LOG", help="JSON-lines event file.")
def train(
    run_id: str,
    server_addr: str,
    identity_secret_key_path: str | None,
    bind_p2p_port: int,
    bind_p2p_host: str,
    micro_batch_size: int,
    checkpoint_dir: str | None,
    keep_steps: int,
    hub_repo: str | None,
    max_concurrent_parameter_requests: int,
    parameter_request_timeout: float,
    device: str,
    logs: str,
    event_log: str | None,
) -> None:
    """Join RUN_ID at SERVER_ADDR and train until the run is finished."""
    setup_logging(logs)
    from psyche.daemon.checkpointing import CheckpointOptions
    from psyche.daemon.runner import ClientOptions, run_client
    from psyche.daemon.sharing import SharingOptions

    token = os.environ.get("HF_TOKEN") or None
    if hub_repo and not checkpoint_dir:
        raise click.UsageError("--hub-repo needs --checkpoint-dir (uploads are made from it)")
    if hub_repo and not token:
        raise click.UsageError("--hub-repo needs HF_TOKEN with write access to the repo")
    if max_concurrent_parameter_requests < 1 or parameter_request_timeout <= 0:
        raise click.UsageError(
            "--max-concurrent-parameter-requests and --parameter-request-timeout must be positive"
        )

    options = ClientOptions(
        run_id=run_id,
        server_addr=server_addr,
        key_path=identity_secret_key_path,
        raw_key=os.environ.get("RAW_IDENTITY_SECRET_KEY"),
        p2p_host=bind_p2p_host,
        p2p_port=bind_p2p_port,
        micro_batch_size=micro_batch_size,
        checkpoint=CheckpointOptions(
            checkpoint_dir=checkpoint_dir, keep_steps=keep_steps, hub_repo=hub_repo, hub_token=token
        ),
        sharing=SharingOptions(
            max_concurrent_requests=max_concurrent_parameter_requests,
            request_timeout_s=parameter_request_timeout,
        ),
        device=device,
        event_log=event_log,
    )
    try:
        code = asyncio.run(run_client(options))
    except KeyboardInterrupt:
        logging.getLogger("psyche").warning("interrupted")
        code = 130
    sys.exit(code)
