"""Checkpoints in a Google Cloud Storage bucket (``Gcs{bucket, prefix}`` / ``P2PGcs``).

Through the official client library (``google-cloud-storage``): credentials come from the
standard environment (``GOOGLE_APPLICATION_CREDENTIALS``, or the metadata server), and
``STORAGE_EMULATOR_HOST`` points the library at an emulator (then no credentials are needed).

:func:`upload_checkpoint` writes every file of a local checkpoint directory as
``<prefix>/step-<N>/<name>`` with resumable uploads (a fixed chunk size makes the library use
one resumable session per file, so a dropped connection resumes instead of restarting), then
reads back each object's MD5 and compares it with the local file's before it writes the
``manifest.json`` that marks the step complete: a reader never sees a half-written step.
:func:`download_checkpoint` takes the step the prefix names (``…/step-N``, what a checkpointer
reports to the coordinator), else the newest complete step under it, downloads its files and
checks every MD5 against the manifest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["GcsError", "base_prefix", "download_checkpoint", "step_prefix", "upload_checkpoint"]

MANIFEST = "manifest.json"
CHUNK_SIZE = 8 * 1024 * 1024
"""Resumable upload chunk (a multiple of 256 KiB, as the API requires)."""


class GcsError(Exception):
    """A GCS transfer failed or what was written does not match; the message says which."""


def base_prefix(prefix: str | None) -> str:
    """``prefix`` without a trailing ``step-N``: the coordinator stores the reported step's own
    prefix, and the next upload goes beside it, not inside it."""
    parts = [p for p in (prefix or "").split("/") if p]
    if parts and parts[-1].startswith("step-") and parts[-1][5:].isdigit():
        parts.pop()
    return "/".join(parts)


def step_prefix(prefix: str | None, step: int) -> str:
    base = base_prefix(prefix)
    return f"{base}/step-{step}" if base else f"step-{step}"


def _named_step(prefix: str | None) -> int | None:
    last = (prefix or "").rstrip("/").rsplit("/", 1)[-1]
    return int(last[5:]) if last.startswith("step-") and last[5:].isdigit() else None


def _md5_b64(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return base64.b64encode(h.digest()).decode()


def _client() -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return storage.Client(project="psyche-emulator", credentials=AnonymousCredentials())
    return storage.Client()


def upload_checkpoint(folder: str | os.PathLike[str], bucket: str, prefix: str | None,
                      step: int) -> str:  # fmt: skip
    """Upload ``folder`` as step ``step``; returns the step's object prefix."""
    from google.api_core import exceptions

    root = Path(folder)
    files = sorted(p for p in root.iterdir() if p.is_file())
    if not files:
        raise GcsError(f"{root} has no files to upload")
    where = step_prefix(prefix, step)
    try:
        b = _client().bucket(bucket)
        manifest: dict[str, str] = {}
        for p in files:
            blob = b.blob(f"{where}/{p.name}", chunk_size=CHUNK_SIZE)
            blob.upload_from_filename(str(p))
            blob.reload()
            want = _md5_b64(p)
            if blob.md5_hash != want:
                raise GcsError(f"gs://{bucket}/{blob.name}: MD5 {blob.md5_hash} after upload, "
                               f"the file's is {want}")  # fmt: skip
            manifest[p.name] = want
        b.blob(f"{where}/{MANIFEST}").upload_from_string(
            json.dumps({"step": step, "md5": manifest}, sort_keys=True),
            content_type="application/json",
        )
    except exceptions.GoogleAPICallError as e:
        raise GcsError(f"gs://{bucket}/{where}: {e}") from None
    return where


def _newest_step(b: Any, prefix: str | None) -> int:
    base = step_prefix(prefix, 0)[: -len("step-0")]
    steps = []
    for blob in b.list_blobs(prefix=base):
        rest = blob.name[len(base) :]
        name, _, file = rest.partition("/")
        if file == MANIFEST and name.startswith("step-") and name[5:].isdigit():
            steps.append(int(name[5:]))
    if not steps:
        raise GcsError(f"gs://{b.name}/{base}: no complete checkpoint (no {MANIFEST})")
    return max(steps)


def download_checkpoint(bucket: str, prefix: str | None, dest: str | os.PathLike[str],
                        step: int | None = None) -> Path:  # fmt: skip
    """Download the newest complete step (or ``step``) into ``dest``; returns the directory."""
    from google.api_core import exceptions

    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    try:
        b = _client().bucket(bucket)
        if step is None:
            step = _named_step(prefix)
        n = _newest_step(b, prefix) if step is None else step
        where = step_prefix(prefix, n)
        manifest = json.loads(b.blob(f"{where}/{MANIFEST}").download_as_bytes())
        for name, md5 in sorted(manifest["md5"].items()):
            if "/" in name or name in ("", ".", ".."):
                raise GcsError(f"gs://{bucket}/{where}/{MANIFEST}: bad file name {name!r}")
            target = out / name
            if target.is_file() and _md5_b64(target) == md5:
                continue  # already in the cache, verified
            # Clients on one machine share the cache: each downloads into its own file and
            # renames it into place only once verified, so none reads another's half-written one.
            part = out / f".{name}.{os.getpid()}.{threading.get_ident()}.part"
            try:
                b.blob(f"{where}/{name}").download_to_filename(str(part))
                if _md5_b64(part) != md5:
                    raise GcsError(f"gs://{bucket}/{where}/{name}: MD5 does not match the manifest")
                os.replace(part, target)
            finally:
                part.unlink(missing_ok=True)
    except exceptions.GoogleAPICallError as e:
        raise GcsError(f"gs://{bucket}: {e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise GcsError(f"gs://{bucket}: bad manifest ({e})") from None
    return out
