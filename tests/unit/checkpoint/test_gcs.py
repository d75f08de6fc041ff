"""Checkpoints in a GCS bucket, through google-cloud-storage against a local emulator
(gcp-storage-emulator, started here on a free loopback port; never the internet)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from psyche.checkpoint.gcs import CHUNK_SIZE, GcsError, download_checkpoint, upload_checkpoint

BUCKET = "psyche-ckpt"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    port = _free_port()
    exe = Path(sys.executable).parent / "gcp-storage-emulator"
    proc = subprocess.Popen(
        [str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory",
         "--default-bucket", BUCKET, "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None, "the emulator exited"
                assert time.monotonic() < deadline, "the emulator did not listen"
                time.sleep(0.1)
        host = f"http://127.0.0.1:{port}"
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        yield host
    finally:
        proc.terminate()
        proc.wait(10)


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
