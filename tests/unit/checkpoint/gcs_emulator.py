"""A local GCS emulator for tests (gcp-storage-emulator, on a free loopback port, in memory; never
the internet): the ``emulator`` fixture points google-cloud-storage at it through
``STORAGE_EMULATOR_HOST`` and yields its URL. Import the fixture where it is used."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.net import free_port

BUCKET = "psyche-ckpt"


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    port = free_port()
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
