"""A throwaway PostgreSQL server for the explorer's tests: ``initdb`` and ``pg_ctl`` (Debian's
``postgresql``, installed by scripts/system-deps.sh) in a temporary directory, on a free loopback
port, no Unix socket, stopped and deleted afterwards. PostgreSQL refuses to run as root, so as
root the server runs as the ``postgres`` system user (``runuser``), which owns the directory.

Where the binaries are absent the test skips with the reason, except in CI (``CI`` set), where
that is a failure: CI installs them."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.net import free_port

__all__ = ["postgres_bin", "throwaway_postgres"]


def postgres_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, else Debian's newest version."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    return versions[-1].parent if versions else None


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A running server for the duration; its ``postgresql://`` URL (user ``explorer``, trust
    authentication on 127.0.0.1 only)."""
    bindir = postgres_bin()
    if bindir is None:
        why = "no PostgreSQL binaries (initdb, pg_ctl): scripts/system-deps.sh installs Debian's"
        if os.environ.get("CI"):
            pytest.fail(why + " — CI must have them")
        pytest.skip(why)
    as_user: list[str] = []
    top = Path(tempfile.mkdtemp(prefix="psyche-explorer-pg-"))
    if os.geteuid() == 0:
        pg = pwd.getpwnam("postgres")
        os.chown(top, pg.pw_uid, pg.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log = top / "data", top / "server.log"
    port = free_port()

    def run(*cmd: str, timeout: float = 30) -> None:
        got = subprocess.run(
            [*as_user, *cmd], capture_output=True, text=True, timeout=timeout, cwd=top
        )
        if got.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise AssertionError(f"{cmd[0]} failed: {got.stdout}{got.stderr}{tail}")

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "explorer", "--auth=trust",
            "-E", "UTF8", "--no-sync", "--no-instructions")  # fmt: skip
        options = (
            f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off"
        )
        run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log),
            "-w", "-t", "20", "start")  # fmt: skip
        try:
            yield f"postgresql://explorer@127.0.0.1:{port}/postgres"
        finally:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "20", "stop")
    finally:
        shutil.rmtree(top, ignore_errors=True)
