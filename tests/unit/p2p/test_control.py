"""Control frames between the node and its host process: codec, bounds, strictness."""

from __future__ import annotations

import msgspec
import pytest

from psyche.p2p.control import (
    MAX_CONTROL_FRAME,
    Ack,
    Asked,
    CancelFetch,
    Connect,
    Counters,
    Delivery,
    Failed,
    Fetch,
    FetchDone,
    FetchErrorKind,
    FetchFailure,
    FrameDecoder,
    Init,
    PeerReport,
    PeerStats,
    Publish,
    Ready,
    Serve,
    SetAllowedPeers,
    Shutdown,
    Unserve,
    decode_host,
    decode_parent,
    encode_frame,
)
from psyche.p2p.errors import ControlError

PEER = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
H = bytes(range(32))

TO_HOST = [
    Init(bytes(32), "run", "127.0.0.1", 0, "/dev/shm/x", owns_blob_dir=True, log_level=10),
    Connect(1, [f"/ip4/127.0.0.1/tcp/4001/p2p/{PEER}"]),
    SetAllowedPeers([PEER]),
    Publish(2, b"x" * 4096),
    Serve(H, "/dev/shm/x/a.blob", 10),
    Serve(H, "/dev/shm/x/b.blob", 10, handoff=False),
    Serve(H, "/dev/shm/x/c.blob", 10, report_askers=True),
    Unserve(H),
    Fetch(3, H, 1 << 20, [PEER], 600.0, 10.0),
    CancelFetch(3),
    Shutdown(),
]
TO_PARENT = [
    Ready(PEER, [f"/ip4/127.0.0.1/tcp/4001/p2p/{PEER}"]),
    Failed("port in use"),
    Ack(1),
    Ack(2, "publish failed"),
    Delivery(PEER, b"hello"),
    FetchDone(3, "/dev/shm/x/a.blob", PEER, 10, 0.5, [FetchFailure(PEER, "busy")]),
    FetchDone(4, None, None, 0, 1.0, [], kind=FetchErrorKind.too_large, error="big"),
    PeerStats([PeerReport(PEER, True, 0.004, 2e8, 3, 1)], [PEER], Counters(published=5)),
    PeerStats([], [], Counters(), asked=[Asked(H, [PEER])]),
]


def test_every_message_round_trips_through_frames_fed_byte_by_byte() -> None:
    wire = b"".join(encode_frame(m) for m in TO_HOST)
    decoder = FrameDecoder()
    frames = [f for i in range(len(wire)) for f in decoder.feed(wire[i : i + 1])]
    assert [decode_parent(f) for f in frames] == TO_HOST and decoder.buffered == 0
    wire = b"".join(encode_frame(m) for m in TO_PARENT)
    assert [decode_host(f) for f in FrameDecoder().feed(wire)] == TO_PARENT


def test_partial_frame_stays_buffered() -> None:
    frame = encode_frame(Ack(1))
    decoder = FrameDecoder()
    assert decoder.feed(frame[:-1]) == [] and decoder.buffered == len(frame) - 1
    assert decoder.feed(frame[-1:]) == [frame[4:]]


def test_oversize_frame_is_rejected_from_its_header() -> None:
    decoder = FrameDecoder(max_size=100)
    with pytest.raises(ControlError, match="exceeds"):
        decoder.feed((101).to_bytes(4, "big"))  # no payload needed to refuse it
    with pytest.raises(ControlError, match="exceeds"):
        FrameDecoder().feed((MAX_CONTROL_FRAME + 1).to_bytes(4, "big") + b"x")
    with pytest.raises(ControlError, match="exceeds"):
        encode_frame(SetAllowedPeers(["x" * 128] * 4096 * 3))


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xc1",
        msgspec.msgpack.encode({"type": "Nope"}),
        msgspec.msgpack.encode({"type": "Publish", "req_id": 1, "data": b"x" * 4097}),
        msgspec.msgpack.encode({"type": "Publish", "req_id": -1, "data": b""}),
        msgspec.msgpack.encode({"type": "Unserve", "blob_hash": bytes(31)}),
        msgspec.msgpack.encode({"type": "Shutdown", "extra": 1}),
        msgspec.msgpack.encode(
            {
                "type": "Fetch",
                "req_id": 1,
                "blob_hash": H,
                "max_size": 1,
                "peers": [],
                "timeout": 0.0,
                "attempt_timeout": 1.0,
            }
        ),
    ],
)
def test_garbage_is_rejected(payload: bytes) -> None:
    with pytest.raises(ControlError):
        decode_parent(payload)


def test_each_side_accepts_only_its_own_direction() -> None:
    with pytest.raises(ControlError):
        decode_host(encode_frame(Shutdown())[4:])
    with pytest.raises(ControlError):
        decode_parent(encode_frame(Ready(PEER, []))[4:])
