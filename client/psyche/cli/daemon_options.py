"""The flags every ``train`` command shares (centralized and Solana): P2P binding, batch, device,
logs, checkpoints (local, Hub) and P2P model fetching. One definition, so both clients offer the
same features under the same names and environment twins."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from psyche.cli.checks import bind_address, blob_folder, device_name
from psyche.cli.paths import AbsolutePath, absolute

if TYPE_CHECKING:  # imported when used: they pull in torch, which a --help need not load
    from psyche.daemon.checkpointing import CheckpointOptions
    from psyche.daemon.parts import DaemonOptions
    from psyche.daemon.sharing import SharingOptions
    from psyche.metrics import WandbOptions

__all__ = [
    "TrainingFlags",
    "daemon_options",
    "default_logs",
    "take_checkpoint_and_sharing",
    "take_training_flags",
]

F = TypeVar("F", bound=Callable[..., Any])


def default_logs() -> str:
    """``--logs``' default: ``tui`` where a terminal is attached (the documented default),
    ``console`` where the output goes to a file or a pipe (docker logs, a supervisor)."""
    return "tui" if sys.stdout.isatty() else "console"


def daemon_options(*, p2p_host: str = "0.0.0.0") -> Callable[[F], F]:
    """Add the shared flags; ``p2p_host`` is the default of ``--bind-p2p-host`` (all
    interfaces, as documented, for both clients)."""
    options = [
        click.option(
            "--bind-p2p-port",
            default=0,
            show_default=True,
            envvar="BIND_P2P_PORT",
            type=click.IntRange(0, 65535),
            help="P2P port (0: a free one).",
        ),
        click.option(
            "--bind-p2p-host",
            "--bind-p2p-interface",
            "bind_p2p_host",
            default=p2p_host,
            show_default=True,
            envvar=["BIND_P2P_HOST", "BIND_P2P_INTERFACE"],
            callback=bind_address,
            help="IP address to listen on for P2P (0.0.0.0: all interfaces), or a network "
            "interface name (eth0) whose IPv4 address is used.",
        ),
        click.option(
            "--p2p-blob-dir",
            default=None,
            envvar="P2P_BLOB_DIR",
            type=click.Path(),  # blob_folder checks it, in one line
            callback=blob_folder,
            help="Where the P2P host keeps its blobs (peers' results, model pieces, SparseLoCo "
            "audit states), in a directory of its own removed at exit. Default: /dev/shm when "
            "it has 1 GiB free (a container's has 64 MiB unless started with --shm-size), "
            "else the temp directory.",
        ),
        click.option(
            "--data-parallelism",
            default=1,
            show_default=True,
            envvar="DATA_PARALLELISM",
            type=click.IntRange(1),
            help="Devices (worker processes) the client's batch is split over; gradients are "
            "summed locally, one payload is sent.",
        ),
        click.option(
            "--tensor-parallelism",
            default=1,
            show_default=True,
            envvar="TENSOR_PARALLELISM",
            type=click.IntRange(1),
            help="Devices each model copy's linear layers are sharded over (per data-parallel "
            "replica; DP × TP devices in all).",
        ),
        click.option(
            "--micro-batch-size",
            default=2,
            show_default=True,
            envvar="MICRO_BATCH_SIZE",
            type=click.IntRange(1),
            help="Samples per forward/backward on one device (as high as memory allows).",
        ),
        click.option(
            "--grad-accum-in-fp32",
            is_flag=True,
            default=False,
            envvar="GRAD_ACCUM_IN_FP32",
            help="Sum micro-batch gradients in fp32 buffers (bf16 models), rounded once.",
        ),
        click.option(
            "--eval-tasks",
            default=None,
            envvar="EVAL_TASKS",
            help="Comma-separated eval tasks (hellaswag, arc_easy, arc_challenge, mmlu from the "
            "local Hub datasets cache, or .jsonl files / directories), scored at each cooldown.",
        ),
        click.option(
            "--eval-fewshot",
            default=0,
            show_default=True,
            envvar="EVAL_FEWSHOT",
            type=click.IntRange(0),
        ),
        click.option("--eval-seed", default=42, show_default=True, envvar="EVAL_SEED", type=int),
        click.option(
            "--eval-task-max-docs",
            default=None,
            envvar="EVAL_TASK_MAX_DOCS",
            type=click.IntRange(1),
            help="Documents scored per task (default: all).",
        ),
        click.option(
            "--write-gradients-dir",
            default=None,
            envvar="WRITE_GRADIENTS_DIR",
            type=AbsolutePath(file_okay=False),
            help="Write every verified payload (peers' and our own) to this directory.",
        ),
        click.option(
            "--dummy-training-delay-secs",
            default=None,
            envvar="DUMMY_TRAINING_DELAY_SECS",
            type=click.FloatRange(0),
            help="Testing: hold each trained result back this many seconds before publishing.",
        ),
        click.option(
            "--max-concurrent-downloads",
            default=8,
            show_default=True,
            envvar="MAX_CONCURRENT_DOWNLOADS",
            type=click.IntRange(1),
            help="Peers' results downloaded at once.",
        ),
        click.option(
            "--compression",
            default=None,
            envvar="COMPRESSION",
            type=click.IntRange(0),
            help="Accepted for compatibility; has no effect (see the warning it prints).",
        ),
        click.option(
            "--optim-stats-steps",
            default=None,
            envvar="OPTIM_STATS_STEPS",
            type=click.IntRange(1),
            help="Log optimizer statistics every N steps.",
        ),
        click.option("--wandb-project", default=None, envvar="WANDB_PROJECT"),
        click.option("--wandb-run", default=None, envvar="WANDB_RUN"),
        click.option("--wandb-group", default=None, envvar="WANDB_GROUP"),
        click.option("--wandb-entity", default=None, envvar="WANDB_ENTITY"),
        click.option(
            "--write-log",
            default=None,
            envvar="WRITE_LOG",
            type=AbsolutePath(dir_okay=False),
            help="Also write the log to this file.",
        ),
        click.option(
            "--checkpoint-dir",
            default=None,
            envvar="CHECKPOINT_DIR",
            help="Every client saves the epoch's weights as {dir}/{run_id}-step{N}/ (Hugging Face "
            "format) at each cooldown; elected checkpointers also upload them (--hub-repo).",
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
        click.option(
            "--device",
            default="auto",
            show_default=True,
            envvar="PSYCHE_DEVICE",
            callback=device_name,
            help="auto (CUDA if usable, else the CPU), cpu, cuda, cuda:N, or mps (Apple GPUs, "
            "where torch reports it; only with DP = TP = 1).",
        ),
        click.option(
            "--logs",
            type=click.Choice(["console", "json", "tui"]),
            default=default_logs,
            show_default="tui on a terminal, console otherwise",
            envvar="LOGS",
            help="tui and console: readable log lines with the periodic status line (this "
            "client draws no full-screen view); json: one JSON object per line.",
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
    """Pop the checkpoint and sharing flags from ``kw``, check them, and build their options
    (checked before the options' modules, which bring torch, are imported)."""
    # The Hub upload runs in a child process: it gets the folder as an absolute path.
    checkpoint_dir = kw.pop("checkpoint_dir")
    checkpoint_dir = str(absolute(checkpoint_dir)) if checkpoint_dir else None
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
    from psyche.daemon.checkpointing import CheckpointOptions
    from psyche.daemon.sharing import SharingOptions

    checkpoint = CheckpointOptions(
        checkpoint_dir=checkpoint_dir,
        keep_steps=kw.pop("keep_steps"),
        hub_repo=hub_repo,
        hub_token=token,
    )
    return checkpoint, SharingOptions(max_concurrent_requests=requests, request_timeout_s=timeout)


@dataclass(frozen=True, slots=True)
class TrainingFlags:
    """The flags of :func:`daemon_options` beyond checkpoints and sharing, checked."""

    daemon: DaemonOptions
    wandb: WandbOptions | None
    data_parallelism: int
    tensor_parallelism: int
    grad_accum_fp32: bool


def take_training_flags(kw: dict[str, Any]) -> TrainingFlags:
    """Pop the parallelism, eval, metrics and debugging flags from ``kw``, check them (before
    importing the modules that bring torch) and build options."""
    project = kw.pop("wandb_project")
    run, group, entity = kw.pop("wandb_run"), kw.pop("wandb_group"), kw.pop("wandb_entity")
    if project is None and (run or group or entity):
        raise click.UsageError("--wandb-run/--wandb-group/--wandb-entity need --wandb-project")
    from psyche.daemon.evaluating import EvalOptions
    from psyche.daemon.parts import DaemonOptions
    from psyche.metrics import WandbOptions

    compression = kw.pop("compression")
    if compression is not None:
        logging.getLogger("psyche.client").warning(
            "--compression %d has no effect here: a result's size is set by the run's DisTrO "
            "config (compression_topk, compression_chunk) and the payload format's own entropy "
            "coding, which every client must share",
            compression,
        )
    tasks = kw.pop("eval_tasks")
    fewshot, seed, max_docs = (
        kw.pop("eval_fewshot"),
        kw.pop("eval_seed"),
        kw.pop("eval_task_max_docs"),
    )
    evals = (
        EvalOptions(tasks=tasks, fewshot=fewshot, seed=seed, max_docs=max_docs) if tasks else None
    )
    delay = kw.pop("dummy_training_delay_secs")
    daemon = DaemonOptions(
        optim_stats_steps=kw.pop("optim_stats_steps"),
        training_delay_s=float(delay or 0.0),
        max_concurrent_downloads=kw.pop("max_concurrent_downloads"),
        gradients_dir=kw.pop("write_gradients_dir"),
        evals=evals,
    )
    wandb = WandbOptions(project=project, run=run, group=group, entity=entity) if project else None
    return TrainingFlags(
        daemon=daemon,
        wandb=wandb,
        data_parallelism=kw.pop("data_parallelism"),
        tensor_parallelism=kw.pop("tensor_parallelism"),
        grad_accum_fp32=kw.pop("grad_accum_in_fp32"),
    )
