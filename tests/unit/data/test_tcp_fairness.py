"""The data server's per-request cap, streamed answers, fair reads and dropped abandoned work.

A real server on 127.0.0.1 and raw sockets; peers that must count as another host connect from
127.0.0.2. The provider is a real :class:`LocalDataProvider` behind a wrapper that records each
read and can make reads slow or hold them, so the order in which the server reads is observable.
Before the fix a request was read whole on one thread: a small request waited for every big one
ahead of it, and a request whose peer had gone was still read.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import pytest
import torch

from psyche.data.local import LocalDataProvider
from psyche.data.provider import DataError
from psyche.data.server_messages import (
    MAX_REQUEST_SAMPLES,
    MAX_RESPONSE_FRAME,
    Challenge,
    ChallengeResponse,
    Ready,
    RejectReason,
    RequestRejected,
    RequestTrainingData,
    ServerMessage,
    TrainingData,
    WireBatchId,
    auth_message,
    decode_server,
    encode,
    max_request_samples,
    training_data_header,
    unpack_tokens,
)
from psyche.data.tcp_client import TcpDataProvider
from psyche.data.tcp_server import MAX_PIPELINED, BackgroundDataServer, DataServer, allow_all
from psyche.net.errors import FrameError
from psyche.net.framing import encode_frame, recv_frame
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import SecretKey
from psyche.protocol.locations import SeededShuffle
from support.waiting import until_sync

from .helpers import write_npy

KEY = SecretKey.from_bytes(b"\x09" * 32)


class _Recorded:
    """A real provider whose reads are recorded, and optionally slowed (like a disk: a time per
    sample) or held."""

    def __init__(self, inner: LocalDataProvider, per_sample: float = 0.0) -> None:
        self.inner = inner
        self.per_sample = per_sample
        self.reads: list[BatchId] = []
        self.done: list[BatchId] = []
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    @property
    def seq_len(self) -> int:
        return self.inner.seq_len

    @property
    def num_samples(self) -> int:
        return self.inner.num_samples

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        with self._lock:
            self.reads.append(batch_id)
        assert self.gate.wait(30)
        time.sleep(self.per_sample * batch_id.size)
        samples = self.inner.get_samples(batch_id)
        with self._lock:
            self.done.append(batch_id)
        return samples


def _local(tmp_path: Path, seq_len: int, samples: int) -> LocalDataProvider:
    tokens = (np.arange(samples * seq_len) % 60_000).astype("<u2")
    write_npy(tmp_path / "a.npy", tokens)
    return LocalDataProvider(tmp_path, seq_len, shuffle=SeededShuffle((5,) * 32))


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    challenge = decode_server(recv_frame(sock, MAX_RESPONSE_FRAME))
    assert isinstance(challenge, Challenge)
    answer = ChallengeResponse(KEY.public_key(), KEY.sign(auth_message(challenge.nonce)))
    sock.sendall(encode_frame(encode(answer)))
    assert isinstance(decode_server(recv_frame(sock, MAX_RESPONSE_FRAME)), Ready)
    return sock


def _request(sock: socket.socket, batch: BatchId) -> None:
    sock.sendall(encode_frame(encode(RequestTrainingData(WireBatchId.of(batch)))))


def _answer(sock: socket.socket) -> ServerMessage:
    return decode_server(recv_frame(sock, MAX_RESPONSE_FRAME))


@pytest.mark.parametrize("n_bytes", [0, 1, 300, 70_000])
def test_a_streamed_answer_is_an_ordinary_training_data_message(n_bytes: int) -> None:
    wire_id = WireBatchId(3, 2**40)
    tokens = bytes(range(256)) * (n_bytes // 256) + bytes(n_bytes % 256)
    streamed = training_data_header(wire_id, n_bytes) + tokens
    assert decode_server(streamed) == TrainingData(wire_id, tokens)
    assert msgspec.msgpack.decode(streamed) == msgspec.msgpack.decode(
        encode(TrainingData(wire_id, tokens))
    )


def test_requests_are_capped_and_clients_split_to_the_cap(tmp_path: Path) -> None:
    seq_len = 8  # short samples: the sample cap (1024), not the token cap, applies
    local = _local(tmp_path, seq_len, 40)
    cap = max_request_samples(seq_len)
    assert cap == MAX_REQUEST_SAMPLES
    with BackgroundDataServer(DataServer(local, allow_all)) as bg:
        sock = _connect(bg.port)
        _request(sock, BatchId(0, cap))
        assert _answer(sock) == RequestRejected(WireBatchId(0, cap), RejectReason.TooLarge)
        _request(sock, BatchId(0, cap - 1))
        answer = _answer(sock)
        assert isinstance(answer, TrainingData)
        got = unpack_tokens(answer.tokens, cap, seq_len)
        assert torch.equal(got, local.get_samples(BatchId(0, cap - 1)))
        sock.close()
        assert bg.server.stats["chunks_read"] == cap // 128  # read in chunks of 128 samples

        with TcpDataProvider(f"127.0.0.1:{bg.port}", KEY, seq_len) as client:
            big = BatchId(5, 5 + 2 * cap + 9)
            assert torch.equal(client.get_samples(big), local.get_samples(big))
        assert bg.server.stats["served"] == 1 + 3  # the honest client asked three times


def test_a_small_request_is_not_stuck_behind_another_hosts_big_one(tmp_path: Path) -> None:
    seq_len = 2048
    local = _local(tmp_path, seq_len, 64)
    slow = _Recorded(local, per_sample=0.003)
    with BackgroundDataServer(DataServer(slow, allow_all)) as bg:
        big_batch = BatchId(0, max_request_samples(seq_len) - 1)  # 1.5 s of reads
        greedy = _connect(bg.port, source="127.0.0.2")
        honest = _connect(bg.port)
        _request(greedy, big_batch)
        until_sync(lambda: slow.reads, "the big request to start")
        small = BatchId(10, 13)
        _request(honest, small)
        answer = _answer(honest)
        assert isinstance(answer, TrainingData)
        read_first = sum(b.size for b in slow.done[: slow.done.index(small)])
        big_answer = _answer(greedy)
        assert isinstance(big_answer, TrainingData)
        assert len(big_answer.tokens) == 4 * big_batch.size * seq_len
        # The big request is read 32 samples at a time, the small one beside it; before, all
        # 512 samples were read first.
        assert read_first <= 3 * 32, slow.done
        greedy.close()
        honest.close()


def test_work_of_a_peer_that_left_is_dropped_not_read(tmp_path: Path) -> None:
    seq_len = 2048
    local = _local(tmp_path, seq_len, 64)
    held = _Recorded(local)
    held.gate.clear()
    with BackgroundDataServer(DataServer(held, allow_all)) as bg:
        first = _connect(bg.port)
        _request(first, BatchId(0, 40))  # two chunks; the first read is held
        until_sync(lambda: held.reads, "the first read")
        # Same host, one read at a time: this request's chunk waits behind the held one.
        leaver = _connect(bg.port)
        _request(leaver, BatchId(100, 511))
        time.sleep(0.2)
        leaver.close()
        until_sync(lambda: bg.server.stats["abandoned"] == 1, "the request to be abandoned")
        held.gate.set()
        answer = _answer(first)
        assert isinstance(answer, TrainingData)
        first.close()
        until_sync(lambda: bg.server.stats["served"] == 1, "the first answer to count")
        # Only the first request's two chunks were ever read.
        assert held.reads == [BatchId(0, 31), BatchId(32, 40)]
        assert bg.server.stats["chunks_read"] == 2


@pytest.fixture
def served(tmp_path: Path) -> Iterator[BackgroundDataServer]:
    with BackgroundDataServer(DataServer(_local(tmp_path, 8, 40), allow_all)) as bg:
        yield bg


def test_pipelined_requests_are_answered_up_to_the_limit(served: BackgroundDataServer) -> None:
    sock = _connect(served.port)
    batches = [BatchId(i, i + 1) for i in range(MAX_PIPELINED)]
    sock.sendall(
        b"".join(encode_frame(encode(RequestTrainingData(WireBatchId.of(b)))) for b in batches)
    )
    for b in batches:
        answer = _answer(sock)
        assert isinstance(answer, TrainingData) and answer.batch_id == WireBatchId.of(b)
    sock.sendall(
        b"".join(encode_frame(encode(RequestTrainingData(WireBatchId(i, i)))) for i in range(20))
    )
    # Beyond the limit the connection is closed (answers already sent may come first).
    with pytest.raises((DataError, FrameError, OSError)):
        while True:
            _answer(sock)
    sock.close()
    until_sync(lambda: served.server.faults.counts.get("too_many_requests") == 1, "the fault")


def test_a_trickled_request_is_cut_off(tmp_path: Path) -> None:
    with BackgroundDataServer(
        DataServer(_local(tmp_path, 8, 40), allow_all, frame_timeout=0.5)
    ) as bg:
        sock = _connect(bg.port)
        frame = encode_frame(encode(RequestTrainingData(WireBatchId(0, 1))))
        stop = threading.Event()

        def trickle() -> None:
            # One byte every 0.1 s: each byte is progress, but the frame would take ~4 s.
            for byte in frame:
                if stop.wait(0.1):
                    return
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    return

        sender = threading.Thread(target=trickle)
        started = time.monotonic()
        sender.start()
        sock.settimeout(10)
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        took = time.monotonic() - started
        stop.set()
        sender.join()
        sock.close()
        assert closed and 0.5 <= took < 0.5 + 1.5, f"closed={closed} after {took:.2f} s"
        until_sync(lambda: bg.server.faults.counts.get("frame_timeout") == 1, "the fault")
