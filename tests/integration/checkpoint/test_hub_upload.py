"""Hub uploads against a local test double of the Hub (``fake_hub.FakeHub``).

The upload code is the real one (``huggingface_hub.HfApi.create_commit``); only the endpoint is
ours. Covers: one commit "step N" with every checkpoint file (shards through LFS), the commit id
reported to the coordinator as ``Hub{repo, revision}``, and cancelling an upload before its
commit leaves the repository unchanged.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from psyche.checkpoint.hub import HubUploadError, upload_checkpoint
from psyche.checkpoint.local import save_checkpoint
from psyche.daemon.checkpointing import Checkpointer, CheckpointOptions
from psyche.events import EventLog
from psyche.protocol.locations import Checkpoint, HubCheckpoint, HubRepo

from .fake_hub import FakeHub

CONFIG = b'{"model_type": "llama"}'


def _checkpoint(tmp: Path) -> Path:
    tensors = {"a.weight": torch.arange(12.0).reshape(3, 4), "b.bias": torch.ones(4)}
    return save_checkpoint(
        tensors, tmp, run_id="run", step=12, files={"config.json": CONFIG}, max_shard_bytes=50
    )


@pytest.fixture(autouse=True)
def _lfs_not_xet(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def test_upload_is_one_commit_named_after_the_step_with_every_file(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path)
    with FakeHub() as hub:
        oid = upload_checkpoint(folder, "org/model", 12, token=hub.state.token, endpoint=hub.url)
        [commit] = hub.state.commits
    assert (commit.repo, commit.revision, commit.message, commit.oid) == (
        "org/model",
        "main",
        "step 12",
        oid,
    )
    assert commit.files == {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sum(n.endswith(".safetensors") for n in commit.files) == 2
    assert len(hub.state.lfs) == 2  # the shards went through LFS


class _Backend:
    def __init__(self) -> None:
        self.checkpoints: list[tuple[int, Checkpoint]] = []

    async def send_checkpoint(self, index: int, checkpoint: Checkpoint) -> None:
        self.checkpoints.append((index, checkpoint))


@pytest.mark.slow
def test_checkpointer_uploads_in_the_background_reports_and_cancels_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main(hub: FakeHub) -> None:
        backend = _Backend()
        options = CheckpointOptions(
            checkpoint_dir=str(tmp_path / "ck"),
            keep_steps=1,
            hub_repo="org/model",
            hub_token=hub.state.token,
        )
        ck = Checkpointer(options, backend, EventLog(None, "me"))  # type: ignore[arg-type]
        tensors = {"w": torch.ones(2, 2)}
        files = {"config.json": CONFIG}
        ck.start(
            run_id="r", step=5, epoch=0, index=2, tensors=tensors, files=files, model_hash="0" * 64
        )
        await ck.close()
        [commit] = hub.state.commits
        assert commit.message == "step 5"
        assert backend.checkpoints == [
            (2, HubCheckpoint(HubRepo(repo_id="org/model", revision=commit.oid)))
        ]
        # The next cooldown: the commit hangs, then Cooldown ends (someone else's checkpoint).
        hub.state.stall_commits = True
        ck.start(
            run_id="r", step=9, epoch=1, index=2, tensors=tensors, files=files, model_hash="0" * 64
        )
        for _ in range(600):
            if ck.uploader is not None and ck.uploader._procs:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        ck.cooldown_over(finished=False)
        await ck.close()
        hub.state.stall_commits = False
        assert len(hub.state.commits) == 1 and len(backend.checkpoints) == 1
        assert ck.uploader is not None and not ck.uploader._procs
        # keep_steps=1: only the newest local checkpoint is left.
        assert [p.name for p in (tmp_path / "ck").iterdir()] == ["r-step9"]

    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        asyncio.run(main(hub))


def test_a_rejected_token_is_a_clear_error(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path)
    with FakeHub() as hub, pytest.raises(HubUploadError, match=r"401|Invalid"):
        upload_checkpoint(folder, "org/model", 12, token="wrong", endpoint=hub.url)
