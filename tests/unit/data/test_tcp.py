"""TCP data server and client: handshake, authorization, and surviving bad clients."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from psyche.data.local import LocalDataProvider
from psyche.data.provider import DataError
from psyche.data.server_messages import (
    MAX_REQUEST_FRAME,
    MAX_RESPONSE_FRAME,
    Challenge,
    ChallengeResponse,
    Ready,
    RejectReason,
    RequestRejected,
    RequestTrainingData,
    WireBatchId,
    auth_message,
    decode_server,
    encode,
)
from psyche.data.tcp_client import (
    DataRequestRejected,
    IncompatibleDataServer,
    TcpDataProvider,
)
from psyche.data.tcp_server import BackgroundDataServer, DataServer, RoundAuthorizer
from psyche.net.address import parse_address
from psyche.net.framing import encode_frame, recv_frame
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import SecretKey
from psyche.protocol.locations import SeededShuffle

from .helpers import write_npy

L = 8
ALICE, BOB, MALLORY = (SecretKey.from_bytes(bytes([i]) * 32) for i in (1, 2, 3))


@pytest.fixture
def local(tmp_path: Path) -> LocalDataProvider:
    write_npy(tmp_path / "a.npy", np.arange(40 * L, dtype="<u2"))
    return LocalDataProvider(tmp_path, L, shuffle=SeededShuffle((7,) * 32))


@pytest.fixture
def server(local: LocalDataProvider) -> Iterator[BackgroundDataServer]:
    auth = RoundAuthorizer()
    auth.update(
        [ALICE.public_key(), BOB.public_key()],
        {BatchId(0, 9): ALICE.public_key(), BatchId(10, 19): BOB.public_key()},
    )
    with BackgroundDataServer(DataServer(local, auth, handshake_timeout=2.0)) as bg:
        yield bg


def _client(bg: BackgroundDataServer, key: SecretKey, **kw: object) -> TcpDataProvider:
    return TcpDataProvider(f"127.0.0.1:{bg.port}", key, L, timeout=5.0, backoff=0.01, **kw)  # type: ignore[arg-type]


def _raw(bg: BackgroundDataServer) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", bg.port), timeout=5)
    challenge = decode_server(recv_frame(sock, MAX_RESPONSE_FRAME))
    assert isinstance(challenge, Challenge)
    return sock, challenge.nonce


def _closed(sock: socket.socket) -> bool:
    """True if the server closed ``sock`` (which is then closed here too)."""
    with sock:
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


def _still_serves(bg: BackgroundDataServer, local: LocalDataProvider) -> None:
    with _client(bg, BOB) as c:
        assert np.array_equal(c.get_samples(BatchId(10, 12)), local.get_samples(BatchId(10, 12)))


def test_happy_path(server: BackgroundDataServer, local: LocalDataProvider) -> None:
    with _client(server, ALICE) as c:
        assert c.num_samples == local.num_samples == 40
        assert np.array_equal(c.get_samples(BatchId(0, 9)), local.get_samples(BatchId(0, 9)))
        assert np.array_equal(c.get_samples(BatchId(3, 4)), local.get_samples(BatchId(3, 4)))
    assert server.server.stats["served"] == 2


def test_requester_outside_the_epoch_is_rejected(server: BackgroundDataServer) -> None:
    with _client(server, MALLORY) as c, pytest.raises(DataRequestRejected) as e:
        c.get_samples(BatchId(0, 9))
    assert e.value.reason is RejectReason.NotInThisRound


def test_ids_not_assigned_to_the_requester_are_rejected(server: BackgroundDataServer) -> None:
    with _client(server, ALICE) as c:
        for batch in (BatchId(10, 19), BatchId(5, 10), BatchId(30, 30)):
            with pytest.raises(DataRequestRejected) as e:
                c.get_samples(batch)
            assert e.value.reason is RejectReason.WrongDataIdForStep
        c.get_samples(BatchId(0, 9))  # the connection is still usable after rejections


def test_bad_signature_closes_the_connection_and_others_are_served(
    server: BackgroundDataServer, local: LocalDataProvider
) -> None:
    sock, nonce = _raw(server)
    forged = ChallengeResponse(public_key=ALICE.public_key(), signature=MALLORY.sign(nonce))
    sock.sendall(encode_frame(encode(forged)))
    assert _closed(sock)
    _still_serves(server, local)
    assert server.server.stats["auth_failures"] == 1


def test_signature_over_the_bare_nonce_is_not_accepted(server: BackgroundDataServer) -> None:
    sock, nonce = _raw(server)
    sock.sendall(encode_frame(encode(ChallengeResponse(ALICE.public_key(), ALICE.sign(nonce)))))
    assert _closed(sock)


@pytest.mark.parametrize(
    "payload",
    [
        (MAX_REQUEST_FRAME + 1).to_bytes(4, "big") + b"x" * 100,  # oversize frame
        encode_frame(b"\xc1garbage that is not msgpack"),
        encode_frame(encode(RequestTrainingData(WireBatchId(0, 1)))),  # skips the handshake
        (50).to_bytes(4, "big") + b"partial",  # disconnect mid-frame
    ],
    ids=["oversize", "garbage", "no-handshake", "mid-frame"],
)
def test_bad_clients_are_dropped_and_others_are_served(
    server: BackgroundDataServer, local: LocalDataProvider, payload: bytes
) -> None:
    sock, _ = _raw(server)
    sock.sendall(payload)
    sock.shutdown(socket.SHUT_WR)
    assert _closed(sock)
    _still_serves(server, local)


def test_garbage_after_authentication_closes_only_that_connection(
    server: BackgroundDataServer, local: LocalDataProvider
) -> None:
    sock, nonce = _raw(server)
    answer = ChallengeResponse(ALICE.public_key(), ALICE.sign(auth_message(nonce)))
    sock.sendall(encode_frame(encode(answer)))
    assert isinstance(decode_server(recv_frame(sock, MAX_RESPONSE_FRAME)), Ready)
    sock.sendall(encode_frame(b"\x00\x01\x02"))
    assert _closed(sock)
    _still_serves(server, local)


def test_inverted_interval_is_malformed_and_oversized_too_large(local: LocalDataProvider) -> None:
    with BackgroundDataServer(
        DataServer(local, lambda k, b: None, max_samples_per_request=4)
    ) as bg:
        sock, nonce = _raw(bg)
        answer = ChallengeResponse(ALICE.public_key(), ALICE.sign(auth_message(nonce)))
        sock.sendall(encode_frame(encode(answer)))
        recv_frame(sock, MAX_RESPONSE_FRAME)
        for wire_id, reason in (
            (WireBatchId(5, 4), RejectReason.Malformed),
            (WireBatchId(0, 4), RejectReason.TooLarge),
        ):
            sock.sendall(encode_frame(encode(RequestTrainingData(wire_id))))
            reply = decode_server(recv_frame(sock, MAX_RESPONSE_FRAME))
            assert reply == RequestRejected(wire_id, reason)
        sock.close()


def test_seq_len_mismatch_is_reported(server: BackgroundDataServer) -> None:
    c = TcpDataProvider(f"127.0.0.1:{server.port}", ALICE, L * 2, backoff=0.01)
    with c, pytest.raises(IncompatibleDataServer, match="16"):
        c.get_samples(BatchId(0, 0))


def test_client_reconnects_after_the_connection_drops(
    server: BackgroundDataServer, local: LocalDataProvider
) -> None:
    with _client(server, ALICE) as c:
        c.get_samples(BatchId(0, 0))
        assert c._sock is not None
        c._sock.shutdown(socket.SHUT_RDWR)  # simulate a dead connection
        assert np.array_equal(c.get_samples(BatchId(1, 2)), local.get_samples(BatchId(1, 2)))
    assert server.server.stats["connections"] == 2


def test_unreachable_server_is_a_data_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = TcpDataProvider(f"127.0.0.1:{port}", ALICE, L, retries=1, backoff=0.01, connect_timeout=1)
    with pytest.raises(DataError, match="unreachable after 2 attempts"):
        c.get_samples(BatchId(0, 0))


def test_parse_address() -> None:
    assert parse_address("10.0.0.1:9000") == ("10.0.0.1", 9000)
    assert parse_address("[::1]:80") == ("::1", 80)
    for bad in ("nohost", ":80", "h:0", "h:x"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_large_intervals_are_requested_in_pieces(
    server: BackgroundDataServer, local: LocalDataProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psyche.data.tcp_client as tcp_client

    monkeypatch.setattr(tcp_client, "max_request_samples", lambda seq_len: 3)
    with _client(server, ALICE) as c:
        assert np.array_equal(c.get_samples(BatchId(0, 9)), local.get_samples(BatchId(0, 9)))
    assert server.server.stats["served"] == 4
