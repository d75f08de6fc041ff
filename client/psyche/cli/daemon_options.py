"""The flags every ``train`` command shares (centralized and Solana): P2P binding, batch, device,
logs, checkpoints (local, Hub) and P2P model fetching. One definition, so both clients offer the
same features under the same names and environment twins."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # imported when used: they pull in torch, which a --help need not load
    from psyche.daemon.checkpointing import CheckpointOptions
    from psyche.daemon.sharing import SharingOptions

__all__ = ["daemon_options", "take_checkpoint_and_sharing"]

F = TypeVar("F", bound=Callable[..., Any])


def daemon_options(*, p2p_host: str) -> Callable[[F], F]:
    """Add the shared flags; ``p2p_host`` is the default of ``--bind-p2p-host``."""
    options = [
        click.option("--bind-p2p-port", default=0, show_default=True, envvar="BIND_P2P_PORT"),
        click.option(
            "--bind-p2p-host", default=p2p_host, show_default=True, envvar="BIND_P2P_HOST"
        ),
        click.option("--micro-batch-size", default=2, show_default=True, envvar="MICRO_BATCH_SIZE"),
        click.option(
            "--checkpoint-dir",
            default=None,
            envvar="CHECKPOINT_DIR",
            help="Elected checkpointers save {dir}/{run_id}-step{N}/ (Hugging Face format) at "
            "cooldown.",
        ),
        click.option(
            "--keep-steps",
            default=3,
            show_default=True,
            envvar="KEEP_STEPS",
            help="Newest local checkpoints kept per run (0 keeps all).",
        ),
        click.option(
            "--hub-repo",
            default=None,
            envvar="HUB_REPO",
            help="Also upload each checkpoint to this Hugging Face repo (needs HF_TOKEN and "
            "--checkpoint-dir) and report the commit to the coordinator.",
        ),
        click.option(
            "--max-concurrent-parameter-requests",
            default=8,
            show_default=True,
            envvar="MAX_CONCURRENT_PARAMETER_REQUESTS",
            help="Parameter pieces requested from peers at once when joining a running run.",
        ),
        click.option(
            "--parameter-request-timeout",
            default=30.0,
            show_default=True,
            envvar="PARAMETER_REQUEST_TIMEOUT",
            help="Seconds before a parameter request to one peer is retried on another.",
        ),
        click.option("--device", default="auto", show_default=True, envvar="PSYCHE_DEVICE"),
        click.option(
            "--logs",
            type=click.Choice(["console", "json", "tui"]),
            default="console",
            show_default=True,
            envvar="LOGS",
        ),
        click.option(
            "--event-log", default=None, envvar="EVENT_LOG", help="JSON-lines event file."
        ),
    ]

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def take_checkpoint_and_sharing(kw: dict[str, Any]) -> tuple[CheckpointOptions, SharingOptions]:
    """Pop the checkpoint and sharing flags from ``kw``, check them, and build their options."""
    from psyche.daemon.checkpointing import CheckpointOptions
    from psyche.daemon.sharing import SharingOptions

    checkpoint_dir = kw.pop("checkpoint_dir")
    hub_repo = kw.pop("hub_repo")
    requests = kw.pop("max_concurrent_parameter_requests")
    timeout = kw.pop("parameter_request_timeout")
    token = os.environ.get("HF_TOKEN") or None
    if hub_repo and not checkpoint_dir:
        raise click.UsageError("--hub-repo needs --checkpoint-dir (uploads are made from it)")
    if hub_repo and not token:
        raise click.UsageError("--hub-repo needs HF_TOKEN with write access to the repo")
    if requests < 1 or timeout <= 0:
        raise click.UsageError(
            "--max-concurrent-parameter-requests and --parameter-request-timeout must be positive"
        )
    checkpoint = CheckpointOptions(
        checkpoint_dir=checkpoint_dir,
        keep_steps=kw.pop("keep_steps"),
        hub_repo=hub_repo,
        hub_token=token,
    )
    return checkpoint, SharingOptions(max_concurrent_requests=requests, request_timeout_s=timeout)
