"""Files in a node's blob directory: where the directory goes by default, and writing and
deleting a blob's file without a half-written file served or the event loop held up."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import uuid
from pathlib import Path

__all__ = ["SHM_MIN_FREE", "default_blob_root", "delete_off_loop", "write_into_place"]

SHM_MIN_FREE = 1 << 30
"""Free bytes ``/dev/shm`` must have to hold a node's blobs by default (peers' results, model
pieces, a SparseLoCo trainer's audit chains). A container's is 64 MiB unless it is started with
``--shm-size``: too small for the pieces of one 20 M-parameter model (80 MB in float32)."""


def default_blob_root(shm: str = "/dev/shm", min_free: int = SHM_MIN_FREE) -> str | None:
    """Where a node's blob directory goes by default: ``shm`` (memory, the fastest hand-over
    between the host process and the client) when it is writable and has ``min_free`` bytes
    free, else the system's temp directory (None)."""
    try:
        if not os.access(shm, os.W_OK):
            return None
        st = os.statvfs(shm)
    except OSError:
        return None
    return shm if st.f_bavail * st.f_frsize >= min_free else None


def delete_off_loop(path: Path) -> None:
    """Delete a served file without holding up the event loop: freeing a large file's pages is
    not free (a SparseLoCo trainer's withdrawn audit chain, 19 files of 14 MB on tmpfs, took
    27 ms). The file is renamed away at once (so a later file of the same name is never the one
    deleted), and unlinked in a worker thread when a loop runs."""
    gone = path.with_name(f".{path.name}.{uuid.uuid4().hex}.gone")
    try:
        path.rename(gone)
    except FileNotFoundError:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        gone.unlink(missing_ok=True)
        return
    loop.run_in_executor(None, functools.partial(gone.unlink, missing_ok=True))


def write_into_place(path: Path, blob: bytes) -> None:
    """``blob`` at ``path``, whole or not at all (a host serving it never reads a part)."""
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)
