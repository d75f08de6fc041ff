"""``TcpDataProvider``: the client side of the TCP data server (``ServerData`` locations).

A blocking socket client, because the trainer asks for samples synchronously: connect, answer the
challenge with the node's ed25519 key (see :mod:`psyche.net.handshake`), check that the server cuts
samples of our ``seq_len``, then request one interval at a time over the same connection.

Failure policy: a refusal by the server (:class:`DataRequestRejected`, e.g. ``NotInThisRound``
while our join is still being processed) is an answer, not a fault, and is raised at once. Any
transport fault (refused connection, timeout, reset, a reply that breaks the protocol or does not
echo our interval) drops the connection and retries on a fresh one, ``retries`` times with
exponential backoff, before raising :class:`DataError`. A closed connection during the handshake
usually means the server did not accept our signature.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import torch

from psyche.data.provider import DataError
from psyche.data.server_messages import (
    AUTH,
    MAX_REQUEST_FRAME,
    MAX_RESPONSE_FRAME,
    Challenge,
    Ready,
    RejectReason,
    RequestRejected,
    RequestTrainingData,
    ServerMessage,
    TrainingData,
    WireBatchId,
    WireError,
    decode_server,
    max_request_samples,
    unpack_tokens,
)
from psyche.net.address import parse_address
from psyche.net.codec import encode_message_frame
from psyche.net.errors import FrameError
from psyche.net.framing import recv_frame
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import SecretKey

__all__ = ["DataRequestRejected", "IncompatibleDataServer", "TcpDataProvider"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class DataRequestRejected(DataError):
    """The data server refused a request; ``reason`` says why."""

    def __init__(self, batch_id: BatchId, reason: RejectReason) -> None:
        super().__init__(f"data server rejected {batch_id}: {reason.value}")
        self.batch_id = batch_id
        self.reason = reason


class IncompatibleDataServer(DataError):
    """The server cuts samples of another length than this client trains on."""


class TcpDataProvider:
    """Samples from a ``psyche data serve`` / centralized-server data endpoint."""

    def __init__(
        self,
        address: str,
        secret_key: SecretKey,
        seq_len: int,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        self.address = parse_address(address)
        self._key = secret_key
        self._seq_len = seq_len
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._retries = retries
        self._backoff = backoff
        self._sock: socket.socket | None = None
        self._num_samples: int | None = None
        self._lock = threading.Lock()

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def num_samples(self) -> int:
        """The server's dataset size (connects if not yet connected)."""
        with self._lock:
            if self._num_samples is None:
                self._with_retries(self._connection)
            assert self._num_samples is not None
            return self._num_samples

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        # Intervals larger than one request may hold are asked for in pieces (the server and
        # RoundAuthorizer accept any sub-interval of an assignment).
        step = max_request_samples(self._seq_len)
        pieces = [
            BatchId(a, min(a + step - 1, batch_id.end))
            for a in range(batch_id.start, batch_id.end + 1, step)
        ]
        with self._lock:
            parts = [self._with_retries(functools.partial(self._request, b)) for b in pieces]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> TcpDataProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _with_retries(self, op: Callable[[], T]) -> T:
        last: Exception | None = None
        for attempt in range(self._retries + 1):
            if attempt:
                time.sleep(self._backoff * 2 ** (attempt - 1))
            try:
                return op()
            except (DataRequestRejected, IncompatibleDataServer):
                raise
            except (DataError, OSError) as e:
                last = e
                log.info("data server %s:%d: %s; reconnecting", *self.address, e)
                self.close()
        host, port = self.address
        raise DataError(
            f"data server {host}:{port} unreachable after {self._retries + 1} attempts: {last}"
        )

    def _connection(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        sock = socket.create_connection(self.address, timeout=self._connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self._timeout)
            challenge = self._recv(sock)
            if not isinstance(challenge, Challenge):
                raise WireError(f"expected Challenge, got {type(challenge).__name__}")
            answer = AUTH.answer(self._key, challenge.nonce)
            sock.sendall(encode_message_frame(answer, MAX_REQUEST_FRAME))
            try:
                ready = self._recv(sock)
            except DataError as e:
                raise DataError(f"handshake failed (key not accepted?): {e}") from None
            if not isinstance(ready, Ready):
                raise WireError(f"expected Ready, got {type(ready).__name__}")
            if ready.seq_len != self._seq_len:
                raise IncompatibleDataServer(
                    f"data server cuts samples of {ready.seq_len} tokens, "
                    f"but this client needs {self._seq_len}"
                )
        except BaseException:
            sock.close()
            raise
        self._sock, self._num_samples = sock, ready.num_samples
        return sock

    @staticmethod
    def _recv(sock: socket.socket) -> ServerMessage:
        try:
            payload = recv_frame(sock, MAX_RESPONSE_FRAME)
        except FrameError as e:
            raise DataError(str(e)) from None  # a transport fault: retried like the others
        return decode_server(payload)

    def _request(self, batch_id: BatchId) -> torch.Tensor:
        sock = self._connection()
        wire_id = WireBatchId.of(batch_id)
        sock.sendall(encode_message_frame(RequestTrainingData(wire_id), MAX_REQUEST_FRAME))
        reply = self._recv(sock)
        if not isinstance(reply, TrainingData | RequestRejected) or reply.batch_id != wire_id:
            raise WireError(f"reply {type(reply).__name__} does not answer {batch_id}")
        if isinstance(reply, RequestRejected):
            raise DataRequestRejected(batch_id, reply.reason)
        return unpack_tokens(reply.tokens, batch_id.size, self._seq_len)
