"""A real data server on 127.0.0.1 facing a hostile frame before the handshake finishes.

Before the fix, deeply nested msgpack escaped the decoder as ``RecursionError`` and the server
logged it as an internal error with a traceback, once per frame; now it is a ``WireError``: the
connection is closed, one warning names the peer, and further garbage from it is only counted.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from psyche.data.local import LocalDataProvider
from psyche.data.server_messages import MAX_RESPONSE_FRAME, Challenge, decode_server
from psyche.data.tcp_client import TcpDataProvider
from psyche.data.tcp_server import BackgroundDataServer, DataServer, allow_all
from psyche.net.framing import encode_frame, recv_frame
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import SecretKey
from psyche.protocol.locations import SeededShuffle

SEQ_LEN = 8
HONEST = SecretKey.from_bytes(b"\x05" * 32)
# An unknown field holding 60,000 nested arrays ahead of the tag (≈ 60 KB, under the 64 KiB
# request limit): msgspec must descend into it to skip it.
DEEP = b"\x82\xa1x" + b"\x91" * 60_000 + b"\xc0" + b"\xa4type\xa9Challenge"


@pytest.fixture
def local(tmp_path: Path) -> LocalDataProvider:
    np.save(tmp_path / "a.npy", np.arange(20 * SEQ_LEN, dtype="<u2"), allow_pickle=False)
    return LocalDataProvider(tmp_path, SEQ_LEN, shuffle=SeededShuffle((3,) * 32))


@pytest.fixture
def server(local: LocalDataProvider) -> Iterator[BackgroundDataServer]:
    with BackgroundDataServer(DataServer(local, allow_all, handshake_timeout=5.0)) as bg:
        yield bg


def _send_before_auth(port: int, payload: bytes) -> bool:
    """Sends ``payload`` as the answer to the challenge; True if the server then hung up."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        assert isinstance(decode_server(recv_frame(sock, MAX_RESPONSE_FRAME)), Challenge)
        sock.sendall(encode_frame(payload))
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


def test_deep_msgpack_before_auth_drops_only_that_peer_without_a_traceback(
    server: BackgroundDataServer, local: LocalDataProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        assert _send_before_auth(server.port, DEEP)

    with TcpDataProvider(f"127.0.0.1:{server.port}", HONEST, SEQ_LEN, timeout=10.0) as client:
        got = client.get_samples(BatchId(2, 5))
    assert np.array_equal(got, local.get_samples(BatchId(2, 5)))

    assert server.server.faults.counts == {"malformed": 3}
    assert server.server.stats["served"] == 1
    assert not [r for r in caplog.records if r.exc_info or r.exc_text]
    assert "Traceback" not in caplog.text
    assert "RecursionError" not in caplog.text
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "nested too deeply" in warnings[0].getMessage()
