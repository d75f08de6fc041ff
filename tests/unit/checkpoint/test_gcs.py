"""Checkpoints in a GCS bucket, through google-cloud-storage against a local emulator
(gcp-storage-emulator, started here on a free loopback port; never the internet)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
import torch

from psyche.checkpoint.gcs import CHUNK_SIZE, GcsError, download_checkpoint, upload_checkpoint
from psyche.daemon.checkpointing import (
    Checkpointer,
    CheckpointOptions,
    gcs_checkpoint_dir,
    gcs_repo,
)
from psyche.events import EventLog
from psyche.protocol.locations import Checkpoint, GcsCheckpoint, GcsRepo, P2PGcsCheckpoint
from psyche.training.errors import ModelLoadError

from .gcs_emulator import BUCKET, emulator

__all__ = ["emulator"]  # the fixture, used by name


def _checkpoint(root: Path, seed: int) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "seed": seed}))
    # Larger than one resumable chunk, so the upload takes several requests.
    (root / "model.safetensors").write_bytes(os.urandom(CHUNK_SIZE + 12345))
    return root


def test_upload_then_download_the_newest_step(emulator: str, tmp_path: Path) -> None:
    a = _checkpoint(tmp_path / "a", 1)
    b = _checkpoint(tmp_path / "b", 2)
    assert upload_checkpoint(a, BUCKET, "runs/r1", 5) == "runs/r1/step-5"
    assert upload_checkpoint(b, BUCKET, "runs/r1", 12) == "runs/r1/step-12"
    got = download_checkpoint(BUCKET, "runs/r1", tmp_path / "joiner")
    for name in ("config.json", "model.safetensors"):
        assert (got / name).read_bytes() == (b / name).read_bytes()
    old = download_checkpoint(BUCKET, "runs/r1", tmp_path / "old", step=5)
    assert (old / "model.safetensors").read_bytes() == (a / "model.safetensors").read_bytes()


def test_a_step_without_manifest_is_not_a_checkpoint(emulator: str, tmp_path: Path) -> None:
    with pytest.raises(GcsError, match="no complete checkpoint"):
        download_checkpoint(BUCKET, "nothing/here", tmp_path / "x")


def test_a_corrupted_object_is_refused(emulator: str, tmp_path: Path) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    upload_checkpoint(_checkpoint(tmp_path / "a", 1), BUCKET, None, 3)
    client = storage.Client(project="p", credentials=AnonymousCredentials())
    client.bucket(BUCKET).blob("step-3/config.json").upload_from_string(b"tampered")
    with pytest.raises(GcsError, match="MD5 does not match"):
        download_checkpoint(BUCKET, None, tmp_path / "x")


def test_an_empty_directory_is_not_uploaded(emulator: str, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(GcsError, match="no files"):
        upload_checkpoint(tmp_path / "empty", BUCKET, None, 1)


class _Backend:
    def __init__(self) -> None:
        self.checkpoints: list[tuple[int, Checkpoint]] = []

    async def send_checkpoint(self, index: int, checkpoint: Checkpoint) -> None:
        self.checkpoints.append((index, checkpoint))


def test_the_elected_checkpointer_uploads_to_the_bucket_and_joiners_load_it(
    emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cooldown of a Gcs run: the elected checkpointer saves, uploads to the run's bucket and
    reports Gcs{bucket, prefix of that step}; a cold start loads exactly that step."""
    monkeypatch.setenv("PSYCHE_GCS_CACHE", str(tmp_path / "cache"))
    run_repo = GcsRepo(bucket=BUCKET, prefix="runs/r1")
    backend = _Backend()
    options = CheckpointOptions(checkpoint_dir=str(tmp_path / "ck"), keep_steps=1)
    ck = Checkpointer(options, backend, EventLog(None, "me"))  # type: ignore[arg-type]

    async def cooldown(step: int, repo: GcsRepo, value: float) -> None:
        ck.start(run_id="r1", step=step, epoch=0, index=1, tensors={"w": torch.full((2, 2), value)},
                 files={"config.json": b"{}"}, model_hash="0" * 64, gcs=repo)  # fmt: skip
        await ck.close()

    asyncio.run(cooldown(7, gcs_repo(GcsCheckpoint(run_repo)) or run_repo, 1.0))
    [(index, reported)] = backend.checkpoints
    assert index == 1
    assert reported == GcsCheckpoint(GcsRepo(bucket=BUCKET, prefix="runs/r1/step-7"))
    # The coordinator now stores P2PGcs with that prefix; the next upload goes beside it.
    stored = P2PGcsCheckpoint(reported.repo)
    asyncio.run(cooldown(9, gcs_repo(stored) or run_repo, 2.0))
    assert backend.checkpoints[1][1] == GcsCheckpoint(
        GcsRepo(bucket=BUCKET, prefix="runs/r1/step-9")
    )
    # A joiner after a pause (P2PGcs → Gcs) loads the step the coordinator names.
    path = gcs_checkpoint_dir(reported.repo)
    saved = Path(options.checkpoint_dir or "")
    assert (path / "config.json").read_bytes() == b"{}"
    assert any(p.suffix == ".safetensors" for p in path.iterdir()), list(path.iterdir())
    assert saved.is_dir()
    with pytest.raises(ModelLoadError, match="cannot load the run's checkpoint from GCS"):
        gcs_checkpoint_dir(GcsRepo(bucket=BUCKET, prefix="runs/none"))
