"""A SparseLoCo trainer writes its next audit chain over the files of a withdrawn one, never over a
file an upload still reads (``psyche.training.audit_files``; the uploader's side is
``psyche.p2p.host.blobs._still_served``)."""

from __future__ import annotations

import os
from pathlib import Path

import blake3
import pytest

from psyche.p2p.host.blobs import _still_served
from psyche.training import audit_files
from psyche.training.errors import AuditRecordingError


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    spool, pool = tmp_path / "blobs", tmp_path / "blobs" / ".recycled"
    pool.mkdir(parents=True)
    return spool, pool


def _pooled(pool: Path, name: str, size: int) -> Path:
    path = pool / name
    path.write_bytes(b"\xee" * size)
    return path


def test_a_pooled_file_is_written_over_with_exactly_the_blob(tmp_path: Path) -> None:
    spool, pool = _dirs(tmp_path)
    old = _pooled(pool, "audit-old.blob", 5000)  # longer than the blob: the tail must go
    inode = old.stat().st_ino
    pieces = [b"magic", memoryview(bytes(range(256)) * 4)]
    digest, path = audit_files.spool(spool, pieces, blake3.blake3(), pool)
    assert path.parent == spool and path.stat().st_ino == inode  # the same file, reused
    assert path.read_bytes() == b"".join(pieces)
    assert digest == blake3.blake3(b"".join(pieces)).digest()
    assert list(pool.iterdir()) == []


def test_without_a_pooled_file_a_new_one_is_made(tmp_path: Path) -> None:
    spool, pool = _dirs(tmp_path)
    digest, path = audit_files.spool(spool, [b"abc"], blake3.blake3(), pool)
    assert path.read_bytes() == b"abc" and digest == blake3.blake3(b"abc").digest()
    digest, other = audit_files.spool(spool, [b"abc"], blake3.blake3(), None)  # no pool at all
    assert other != path and other.read_bytes() == b"abc"


def test_a_file_an_upload_still_reads_is_not_written_over(tmp_path: Path) -> None:
    """The uploader opened the served file and locked it before it was withdrawn: the owner
    skips it, and the upload reads the old bytes to the end."""
    spool, pool = _dirs(tmp_path)
    served = spool / "audit-served.blob"
    served.write_bytes(b"old bytes")
    fd = os.open(served, os.O_RDONLY)
    try:
        assert _still_served(fd, str(served))  # the upload's shared lock
        audit_files.recycle(served, pool)  # withdrawn while it uploads
        _, path = audit_files.spool(spool, [b"new bytes"], blake3.blake3(), pool)
        assert path.stat().st_ino != os.fstat(fd).st_ino  # a new file instead
        assert os.pread(fd, 100, 0) == b"old bytes"
        assert (pool / served.name).exists()  # left for later
    finally:
        os.close(fd)
    audit_files.trim(pool)  # the chain is recorded: what it did not reuse goes
    assert list(pool.iterdir()) == []


def test_an_upload_that_opened_a_withdrawn_file_finds_it_gone(tmp_path: Path) -> None:
    """The uploader opened the file just before it was withdrawn and reused, and locks it only
    after: its name no longer names that file, so it answers NOT_FOUND instead of sending the
    next chain's bytes under the old hash."""
    spool, pool = _dirs(tmp_path)
    served = spool / "audit-served.blob"
    served.write_bytes(b"old bytes")
    fd = os.open(served, os.O_RDONLY)
    try:
        audit_files.recycle(served, pool)
        _, path = audit_files.spool(spool, [b"new bytes"], blake3.blake3(), pool)
        assert path.stat().st_ino == os.fstat(fd).st_ino  # reused: nobody held it
        assert not _still_served(fd, str(served))
    finally:
        os.close(fd)


def test_an_upload_is_refused_while_the_owner_writes_over_the_file(tmp_path: Path) -> None:
    import fcntl

    served = tmp_path / "audit-served.blob"
    served.write_bytes(b"old")
    writer = os.open(served, os.O_WRONLY)
    reader = os.open(served, os.O_RDONLY)
    try:
        fcntl.flock(writer, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert not _still_served(reader, str(served))
        fcntl.flock(writer, fcntl.LOCK_UN)
        assert _still_served(reader, str(served))
    finally:
        os.close(reader)
        os.close(writer)


def test_recycle_without_a_pool_deletes(tmp_path: Path) -> None:
    path = tmp_path / "audit-x.blob"
    path.write_bytes(b"x")
    audit_files.recycle(path, None)
    assert not path.exists()
    path.write_bytes(b"x")
    audit_files.recycle(path, tmp_path / "made")  # a missing pool is made
    assert (tmp_path / "made" / "audit-x.blob").read_bytes() == b"x"


def test_a_missing_directory_is_the_recording_error(tmp_path: Path) -> None:
    with pytest.raises(AuditRecordingError, match="cannot write the audit chain"):
        audit_files.spool(tmp_path / "nowhere", [b"x"], blake3.blake3(), None)
