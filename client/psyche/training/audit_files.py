"""The files a SparseLoCo trainer records its audit chain into, and the pool they are reused from.

A trainer writes H + 1 states and two error buffers a round (12 and 4 bytes per parameter), into
its P2P blob directory, from which it serves them (``psyche.training.sparseloco_audit``). A new
file's write costs the kernel's allocation of its pages: on tmpfs 5.3 ms per 14 MB state against
1.6 ms into a file whose pages exist (``bench/README.md``, "The audit chain's files reused"),
and freeing them again when the chain is withdrawn costs as much. Most of a chain is never
fetched, and the chain withdrawn each round is the size of the next one, so its files are moved
into a *pool* instead of deleted (``Transport.unserve(recycle=True)``, :func:`recycle`) and
written over by the next chain (:func:`spool`).

Writing over a file is safe only if no upload still reads it. An uploader holds a shared
``flock`` on the file and checks that its served name still names it (``psyche.p2p.host.blobs``);
a file leaves its served name before it enters the pool, and :func:`spool` takes one only with an
exclusive lock, skipping any it cannot lock. So an upload either holds its lock first (and the
file is not reused until it is done) or finds the file gone (``NOT_FOUND``, as for a withdrawn
blob before).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from psyche.training.errors import AuditRecordingError

__all__ = ["recycle", "spool", "trim"]


class _Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> object: ...
    def digest(self) -> bytes: ...


def spool(
    directory: Path, pieces: Sequence[bytes | memoryview], hasher: _Hasher, pool: Path | None
) -> tuple[bytes, Path]:
    """Write a blob to a file of its own in ``directory`` while ``hasher`` hashes it: (the
    digest, the file). The file is one taken from ``pool`` when one there can be locked, else
    a new one; either way it holds exactly the blob's bytes."""
    fd, path = _take(pool, directory)
    try:
        with os.fdopen(fd, "wb") as f:  # closing it releases the lock
            for piece in pieces:
                hasher.update(piece)
                f.write(piece)
            f.truncate()  # a reused file may have been longer
    except BaseException as e:
        path.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise AuditRecordingError(f"cannot write the audit chain into {directory}: {e}") from e
        raise
    return hasher.digest(), path


def _take(pool: Path | None, directory: Path) -> tuple[int, Path]:
    """An fd open for writing and a fresh name in ``directory``: a pooled file moved there,
    locked exclusively (an upload still reading it holds a shared lock, so it is skipped), or
    a new file."""
    for src in _listed(pool):
        try:
            fd = os.open(src, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            dst = directory / f"audit-{uuid.uuid4().hex}.blob"
            os.rename(src, dst)
        except OSError:
            os.close(fd)
            continue
        return fd, dst
    try:
        dst = directory / f"audit-{uuid.uuid4().hex}.blob"
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise AuditRecordingError(f"cannot write the audit chain into {directory}: {e}") from e
    return fd, dst


def _listed(pool: Path | None) -> list[Path]:
    if pool is None:
        return []
    try:
        return sorted(pool.iterdir())
    except OSError:
        return []


def recycle(path: Path, pool: Path | None) -> None:
    """Hand a chain's file nobody will fetch to ``pool`` (made if missing), or delete it
    without one."""
    if pool is not None:
        with contextlib.suppress(OSError):
            pool.mkdir(exist_ok=True)
            path.rename(pool / path.name)
            return
    path.unlink(missing_ok=True)


def trim(pool: Path | None) -> None:
    """Delete what a recorded chain left in ``pool``: files an upload held while the chain was
    written, or a longer chain's surplus. The pool so holds at most one withdrawn chain
    between rounds, as much as a client freed before it was kept."""
    for path in _listed(pool):
        path.unlink(missing_ok=True)
