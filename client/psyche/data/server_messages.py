"""Messages of the TCP data server protocol (see ``docs/protocol.md``).

Every frame (see :mod:`psyche.net.framing`) holds one msgpack map encoded by msgspec, tagged by
``"type"`` with the class name (:mod:`psyche.net.codec`). Decoding is strict: unknown fields,
wrong types, out-of-range integers and wrong-size keys are errors, so nothing a peer sends
reaches the server logic unvalidated. A session is::

    server → Challenge{nonce: 32 random bytes}
    client → ChallengeResponse{public_key: 32 bytes, signature: 64 bytes}
             signature = ed25519(secret, b"psyche-data-auth" ‖ nonce)
    server → Ready{seq_len, num_samples}          (bad signature: connection closed, no reply)
    client → RequestTrainingData{batch_id}         (any number; at most 4 ahead of the answers)
    server → TrainingData{batch_id, tokens} | RequestRejected{batch_id, reason}

``batch_id`` is ``[start, end]`` (closed, u64) and is echoed back so the client can check the
answer belongs to its request. ``tokens`` holds ``(end - start + 1) · seq_len`` little-endian u32
token ids, row-major. One request may ask for at most :func:`max_request_samples` samples
(:data:`MAX_REQUEST_TOKENS` tokens, and never more than :data:`MAX_REQUEST_SAMPLES` samples,
but always at least one); a larger one is answered ``RequestRejected{TooLarge}`` without reading
anything, and clients split larger intervals into requests of that size. The cap bounds what one
request costs the server (shuffle and reads grow with samples, memory and transfer with tokens),
so a peer cannot make one request occupy it for seconds.

The handshake is :mod:`psyche.net.handshake` with the domain ``b"psyche-data-auth"``.
Frame limits are asymmetric because the traffic is: requests and handshake messages are a few
hundred bytes (the server accepts at most :data:`MAX_REQUEST_FRAME`), token responses are large
(the client accepts at most :data:`MAX_RESPONSE_FRAME`, the reference's 64 MiB).
``Ready`` is not in the reference: it lets the client check its ``seq_len`` against the server's
before training on wrongly cut samples, and tells it the dataset size.
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec
import numpy as np
import torch

from psyche.data.provider import DataError
from psyche.net.codec import MessageDecoder, encode
from psyche.net.framing import MAX_FRAME
from psyche.net.handshake import ChallengeAuth, ChallengeResponse
from psyche.protocol.data_selection import BatchId

__all__ = [
    "AUTH",
    "AUTH_DOMAIN",
    "MAX_REQUEST_FRAME",
    "MAX_REQUEST_SAMPLES",
    "MAX_REQUEST_TOKENS",
    "MAX_RESPONSE_FRAME",
    "Challenge",
    "ChallengeResponse",
    "ClientMessage",
    "Ready",
    "RejectReason",
    "RequestRejected",
    "RequestTrainingData",
    "ServerMessage",
    "TrainingData",
    "WireBatchId",
    "WireError",
    "auth_message",
    "decode_client",
    "decode_server",
    "encode",
    "max_request_samples",
    "pack_tokens",
    "training_data_header",
    "unpack_tokens",
]

AUTH_DOMAIN = b"psyche-data-auth"
AUTH = ChallengeAuth(AUTH_DOMAIN)
MAX_REQUEST_FRAME = 64 * 1024
MAX_RESPONSE_FRAME = MAX_FRAME
MAX_REQUEST_TOKENS = 1 << 20
"""Tokens one request may ask for: a 4 MiB response, read in a few tens of milliseconds."""
MAX_REQUEST_SAMPLES = 1024
"""Samples one request may ask for: the shuffle and the seeks cost per sample, whatever its
length, so short samples need their own bound."""


def max_request_samples(seq_len: int) -> int:
    """The most samples of ``seq_len`` tokens one request may ask for (at least one)."""
    return max(1, min(MAX_REQUEST_SAMPLES, MAX_REQUEST_TOKENS // seq_len))


U32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
U64 = Annotated[int, msgspec.Meta(ge=0)]  # msgpack ints cannot exceed u64 anyway
Bytes32 = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]


class WireError(DataError):
    """A frame did not decode as the expected message type."""


class RejectReason(enum.Enum):
    NotInThisRound = "NotInThisRound"
    """The requester is not a client of the current epoch."""
    WrongDataIdForStep = "WrongDataIdForStep"
    """The ids are not assigned to the requester in this round."""
    Malformed = "Malformed"
    """The interval is invalid (end before start)."""
    TooLarge = "TooLarge"
    """The interval holds more than :func:`max_request_samples` samples (or the server's own,
    lower, limit); ask for it in pieces."""


class WireBatchId(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """Raw interval as sent; may be invalid (``end < start``) until checked."""

    start: U64
    end: U64

    @classmethod
    def of(cls, b: BatchId) -> WireBatchId:
        return cls(b.start, b.end)

    def to_batch_id(self) -> BatchId | None:
        return BatchId(self.start, self.end) if self.end >= self.start else None


class _Msg(msgspec.Struct, tag=True, frozen=True, forbid_unknown_fields=True):
    pass


class Challenge(_Msg, frozen=True):
    nonce: Bytes32


class Ready(_Msg, frozen=True):
    seq_len: U32
    num_samples: U64


class RequestTrainingData(_Msg, frozen=True):
    batch_id: WireBatchId


class TrainingData(_Msg, frozen=True):
    batch_id: WireBatchId
    tokens: bytes


class RequestRejected(_Msg, frozen=True):
    batch_id: WireBatchId
    reason: RejectReason


ServerMessage = Challenge | Ready | TrainingData | RequestRejected
ClientMessage = ChallengeResponse | RequestTrainingData

decode_client: MessageDecoder[ClientMessage] = MessageDecoder(
    ClientMessage, WireError, "bad client message"
)
decode_server: MessageDecoder[ServerMessage] = MessageDecoder(
    ServerMessage, WireError, "bad server message"
)
auth_message = AUTH.message


# ``TrainingData`` is a map whose last field is ``tokens``; an empty ``bytes`` encodes as bin8
# with length 0. Replacing those two bytes by a bin32 header gives the prefix of the message with
# any token payload, so a server can send a response in pieces without holding all of it.
_EMPTY_BIN = b"\xc4\x00"


def training_data_header(batch_id: WireBatchId, n_bytes: int) -> bytes:
    """The bytes of ``encode(TrainingData(batch_id, tokens))`` that precede ``tokens``, for a
    ``tokens`` of ``n_bytes`` bytes (bin32 form, which every msgpack decoder accepts)."""
    empty = encode(TrainingData(batch_id, b""))
    assert empty.endswith(_EMPTY_BIN), "tokens must be the last field of TrainingData"
    return empty[: -len(_EMPTY_BIN)] + b"\xc6" + n_bytes.to_bytes(4, "big")


def pack_tokens(samples: torch.Tensor) -> bytes:
    """``int64 [n, seq_len]`` → little-endian u32 bytes (token ids must fit in u32)."""
    arr = samples.numpy()
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 2**32 - 1):
        raise DataError("token ids must fit in an unsigned 32-bit integer")
    return arr.astype("<u4").tobytes()


def unpack_tokens(data: bytes, n: int, seq_len: int) -> torch.Tensor:
    if len(data) != 4 * n * seq_len:
        raise WireError(f"expected {n}×{seq_len} u32 tokens, got {len(data)} bytes")
    arr = np.frombuffer(data, dtype="<u4").astype(np.int64).reshape(n, seq_len)
    return torch.from_numpy(arr)
