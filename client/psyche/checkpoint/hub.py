"""Uploading a checkpoint to the Hugging Face Hub, in a child process.

See docs/protocol.md, "Cooldown".

:func:`upload_checkpoint` is the real upload: one ``huggingface_hub`` commit with the message
``"step {N}"`` holding every file of a local checkpoint directory (config, tokenizer files, the
safetensors shards and their index); it returns the commit id, which the checkpointer reports to
the coordinator as ``Hub{repo, revision}``. The repository must exist and ``HF_TOKEN`` must be
allowed to write to it. ``HF_ENDPOINT`` (or ``endpoint=``) points it at another Hub.

:class:`HubUploader` runs each upload as ``python -m psyche.checkpoint.hub`` so it continues in
the background without holding the training process's GIL, and so it can be *cancelled cleanly*:
a Hub commit is created by the last request only, so terminating the child before that leaves
the repository unchanged (uploaded LFS objects without a commit are garbage the Hub collects).
The child prints one JSON line, ``{"oid": …}`` or ``{"error": …}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from pathlib import Path

__all__ = ["HubUploadError", "HubUploader", "upload_checkpoint"]

log = logging.getLogger(__name__)

TERMINATE_GRACE_S = 5.0


class HubUploadError(Exception):
    """An upload failed; the message says why (HTTP error, missing token, bad repo)."""


def upload_checkpoint(
    folder: str | os.PathLike[str],
    repo_id: str,
    step: int,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    revision: str | None = None,
) -> str:
    """Commit every file in ``folder`` to ``repo_id`` as ``"step {step}"``; returns the oid."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    root = Path(folder)
    files = sorted(p for p in root.iterdir() if p.is_file())
    if not files:
        raise HubUploadError(f"{root} has no files to upload")
    ops = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=str(p)) for p in files]
    api = HfApi(endpoint=endpoint, token=token)
    try:
        info = api.create_commit(
            repo_id, ops, commit_message=f"step {step}", revision=revision, repo_type="model"
        )
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise HubUploadError(f"upload of {root.name} to {repo_id} failed: {e}") from e
    return str(info.oid)


class HubUploader:
    """Background uploads in child processes; cancel or wait for them."""

    def __init__(self, repo_id: str, *, token: str | None = None) -> None:
        self.repo_id = repo_id
        self.token = token
        self._procs: set[asyncio.subprocess.Process] = set()

    async def upload(self, folder: str | os.PathLike[str], step: int) -> str:
        """Upload in a child process; cancelling this coroutine terminates the child."""
        env = dict(os.environ)
        if self.token:
            env["HF_TOKEN"] = self.token
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "psyche.checkpoint.hub",
            "--folder",
            str(folder),
            "--repo",
            self.repo_id,
            "--step",
            str(step),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        self._procs.add(proc)
        try:
            out, err = await proc.communicate()
        except asyncio.CancelledError:
            await _terminate(proc)
            log.info("cancelled the upload of step %d to %s", step, self.repo_id)
            raise
        finally:
            self._procs.discard(proc)
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            result = json.loads(lines[-1]) if lines else {}
        except ValueError:
            result = {}
        if proc.returncode == 0 and isinstance(result.get("oid"), str):
            return str(result["oid"])
        detail = result.get("error") or err.decode(errors="replace").strip()[-500:]
        raise HubUploadError(f"upload of step {step} to {self.repo_id} failed: {detail}")

    async def terminate_all(self) -> None:
        for proc in list(self._procs):
            await _terminate(proc)


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        async with asyncio.timeout(TERMINATE_GRACE_S):
            await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m psyche.checkpoint.hub")
    parser.add_argument("--folder", required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--step", type=int, required=True)
    args = parser.parse_args(argv)
    token = os.environ.get("HF_TOKEN") or None
    try:
        oid = upload_checkpoint(args.folder, args.repo, args.step, token=token)
    except HubUploadError as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 1
    print(json.dumps({"oid": oid}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
