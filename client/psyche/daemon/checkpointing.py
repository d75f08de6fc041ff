"""The elected checkpointer's work at cooldown: save, upload, report.

See docs/protocol.md, "Checkpoint lifecycle" and "Cooldown".

Every client that runs with ``--checkpoint-dir`` saves the epoch's final weights at Cooldown
(step 1 below; the user documentation's promise). In Cooldown the coordinator also elects
``max(1, ⌊n/3⌋)`` checkpointers (docs/protocol.md item 7); each elected one goes on to steps 2
and 3. The background task

1. saves ``{dir}/{run_id}-step{N}/`` in Hugging Face format (N = the epoch's last step) from a
   copy of the weights taken when Cooldown began, and keeps the newest ``--keep-steps``;
2. with ``--hub-repo`` (and ``HF_TOKEN``), uploads it as the commit ``"step N"`` in a child
   process and reports ``checkpoint(Hub{repo, revision = commit id})``; without one it reports
   the local directory (``Hub{repo = path}``), which a later cold start loads.

The first accepted checkpoint ends Cooldown. When Cooldown ends (by someone's checkpoint or by
time) a checkpointer still uploading cancels cleanly: the upload child is terminated before its
commit, so the repository is unchanged. A run that ends (Finished) lets the upload complete —
the final model is worth having — and :meth:`Checkpointer.close` waits for it on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from psyche.backends.base import Backend, BackendError
from psyche.checkpoint.gcs import GcsError, download_checkpoint, upload_checkpoint
from psyche.checkpoint.hub import HubUploader, HubUploadError
from psyche.checkpoint.local import prune_checkpoints, save_checkpoint
from psyche.events import CheckpointEvent, EventLog, UploadEvent
from psyche.protocol.locations import (
    Checkpoint,
    GcsCheckpoint,
    GcsRepo,
    HubCheckpoint,
    HubRepo,
    P2PGcsCheckpoint,
)
from psyche.training.errors import ModelLoadError

__all__ = ["CheckpointOptions", "Checkpointer", "gcs_checkpoint_dir", "gcs_repo"]

log = logging.getLogger("psyche.daemon")

REPO_ID_MAX_BYTES = 64


def gcs_repo(checkpoint: Checkpoint) -> GcsRepo | None:
    """The bucket of a run that keeps its checkpoints in GCS (``Gcs`` or ``P2PGcs``)."""
    if isinstance(checkpoint, GcsCheckpoint | P2PGcsCheckpoint):
        assert isinstance(checkpoint.repo, GcsRepo)
        return checkpoint.repo
    return None


def gcs_checkpoint_dir(repo: GcsRepo) -> Path:
    """The checkpoint ``repo`` names, downloaded (and verified) into a local cache directory
    (``PSYCHE_GCS_CACHE``, default ``<tmp>/psyche-gcs``): how a cold start loads a Gcs run."""
    cache = os.environ.get("PSYCHE_GCS_CACHE") or str(Path(tempfile.gettempdir()) / "psyche-gcs")
    dest = Path(cache) / repo.bucket / (repo.prefix or "_").strip("/")
    try:
        return download_checkpoint(repo.bucket, repo.prefix, dest)
    except GcsError as e:
        raise ModelLoadError(f"cannot load the run's checkpoint from GCS: {e}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointOptions:
    checkpoint_dir: str | None = None
    """Where this client saves each epoch's weights (``--checkpoint-dir``); nothing is saved
    without it."""
    keep_steps: int = 3
    """Newest local checkpoints kept per run (``--keep-steps``; 0 keeps all)."""
    hub_repo: str | None = None
    """Hugging Face repo to upload to (``--hub-repo``; needs ``HF_TOKEN``)."""
    hub_token: str | None = None


class Checkpointer:
    def __init__(self, options: CheckpointOptions, backend: Backend, events: EventLog) -> None:
        self.options = options
        self.backend = backend
        self.events = events
        self.uploader = (
            HubUploader(options.hub_repo, token=options.hub_token) if options.hub_repo else None
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.options.checkpoint_dir is not None

    @property
    def busy(self) -> bool:
        """A save or upload is in progress."""
        return self._task is not None and not self._task.done()

    def start(
        self,
        *,
        run_id: str,
        step: int,
        epoch: int,
        index: int | None,
        tensors: Mapping[str, torch.Tensor],
        files: Mapping[str, bytes],
        model_hash: str,
        gcs: GcsRepo | None = None,
    ) -> None:
        """Save in the background; an elected checkpointer (``index``: its checkpointer index)
        then uploads and reports to the coordinator, any other client only keeps the copy.
        ``gcs``: the run keeps its checkpoints in this bucket (``Gcs``/``P2PGcs``)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        meta = {"epoch": epoch, "model_hash": model_hash}
        self._task = asyncio.create_task(
            self._run(run_id, step, index, dict(tensors), dict(files), meta, gcs)
        )
        self._task.add_done_callback(_log_failure)

    async def _run(
        self,
        run_id: str,
        step: int,
        index: int | None,
        tensors: dict[str, torch.Tensor],
        files: dict[str, bytes],
        meta: dict[str, object],
        gcs: GcsRepo | None = None,
    ) -> None:
        assert self.options.checkpoint_dir is not None
        directory = self.options.checkpoint_dir
        path = await asyncio.to_thread(
            save_checkpoint, tensors, directory, run_id=run_id, step=step, files=files, meta=meta
        )
        del tensors
        await asyncio.to_thread(prune_checkpoints, directory, run_id, self.options.keep_steps)
        self.events.write(CheckpointEvent(step=step, path=str(path)))
        log.info("saved checkpoint %s", path)
        if index is None:
            return  # not elected: the copy is this client's own
        report: Checkpoint
        if gcs is not None:
            try:
                where = await asyncio.to_thread(
                    upload_checkpoint, path, gcs.bucket, gcs.prefix, step
                )
            except GcsError as e:
                log.warning("checkpoint upload to GCS failed: %s", e)
                return
            # As for the Hub: the repository, and what names this step in it (its prefix).
            self.events.write(UploadEvent(step=step, repo=f"gs://{gcs.bucket}", revision=where))
            log.info("uploaded step %d to gs://%s/%s", step, gcs.bucket, where)
            report = GcsCheckpoint(GcsRepo(bucket=gcs.bucket, prefix=where))
        elif self.uploader is not None:
            oid = await self.uploader.upload(path, step)
            self.events.write(UploadEvent(step=step, repo=self.uploader.repo_id, revision=oid))
            log.info("uploaded step %d to %s@%s", step, self.uploader.repo_id, oid)
            report = HubCheckpoint(HubRepo(repo_id=self.uploader.repo_id, revision=oid))
        else:
            # The coordinator stores repo ids in 64 bytes: prefer the shorter relative form.
            repo_id = min(str(path), os.path.relpath(path), key=len)
            if len(repo_id.encode()) > REPO_ID_MAX_BYTES:
                log.warning(
                    "checkpoint path %s is longer than %d bytes; not reported to the "
                    "coordinator (use a shorter --checkpoint-dir)",
                    repo_id,
                    REPO_ID_MAX_BYTES,
                )
                return
            report = HubCheckpoint(HubRepo(repo_id=repo_id))
        try:
            await asyncio.shield(self.backend.send_checkpoint(index, report))
        except BackendError as e:
            log.warning("the coordinator did not take our checkpoint: %s", e)

    def cooldown_over(self, *, finished: bool) -> None:
        """Cooldown ended: cancel an unfinished upload, unless the run itself is over."""
        task = self._task
        if task is None or task.done() or finished:
            return
        log.info("cooldown ended before our checkpoint was reported; cancelling it")
        task.cancel()

    async def close(self) -> None:
        """Wait for a save or upload still in progress (client shutdown)."""
        task = self._task
        if task is not None and not task.done():
            log.info("waiting for the checkpoint upload to finish")
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _log_failure(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    e = task.exception()
    if isinstance(e, HubUploadError):
        log.error("%s", e)
    elif e is not None:
        log.error("checkpointing failed: %r", e)
