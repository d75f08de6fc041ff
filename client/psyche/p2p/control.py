"""The control protocol between :class:`P2PNode` (asyncio parent) and its libp2p host (trio child).

Why a second process: py-libp2p is trio-only and pure Python. Run in the daemon's process, a
training thread holding the GIL starves it (gossip round trips over a second, blobs at 2 MB/s;
docs/p2p-nat.md, "The libp2p host process"), and trio guest mode inside asyncio failed under
load. So the host runs in a child process and the parent talks to it over a Unix socket pair with
small frames; blobs never cross the socket, they are handed over as files in a shared directory
(``/dev/shm`` when it exists).

Wire format: each frame is a 4-byte big-endian length then one msgspec-msgpack message, tagged
by class name (:mod:`psyche.net.framing`, :mod:`psyche.net.codec`). Both sides bound the frame
size (:data:`MAX_CONTROL_FRAME`) before buffering a frame, and decode strictly, although both ends
are our own code: a bug on one side then fails loudly at the boundary instead of corrupting the
other; anything a decoder can raise on bad bytes (deep nesting, invalid UTF-8 included) and any
framing fault is a :class:`ControlError`. :class:`FrameDecoder` is a pure incremental decoder
shared by the asyncio and trio ends.

Conversation::

    parent → host  Init (first frame: secret key, run id, listen address, blob dir)
    host → parent  Ready{peer_id, listen_addrs} | Failed{error}
    parent → host  Connect, Publish                     → Ack{req_id, error}
                   SetAllowedPeers, Serve, Unserve, Tell (no reply)
                   Fetch{req_id, …}                      → FetchDone{req_id, path | error, …}
                   CancelFetch, Shutdown
                   Reserve{req_id, relay_addrs}          → Reserved{req_id, circuit_addrs, errors}
    host → parent  Delivery{from_peer, data}             (gossip from allowed peers)
                   PeerStats                             (about once a second; also the new
                                                         askers of ``report_askers`` blobs)

Versioning: both ends ship in one package and are started together, so there is no version
number; frames are tagged by class name and new ones are only ever appended (``Reserve`` and
``Reserved`` came with NAT traversal, docs/p2p-nat.md; ``Tell`` with direct resends,
:mod:`psyche.p2p.host.direct`). Fields added to an existing frame have defaults, so a frame
written before the field existed still decodes.

The secret key travels over the socket pair, never on the command line, where ``ps`` shows it.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from psyche.net import framing
from psyche.net.codec import MessageDecoder, encode_message_frame
from psyche.net.errors import FrameError
from psyche.p2p.digests import Digest
from psyche.p2p.errors import (
    BlobNotFound,
    BlobTooLarge,
    ControlError,
    FetchError,
    FetchTimeout,
)
from psyche.p2p.messages import MAX_ANNOUNCEMENT

__all__ = [
    "MAX_CONTROL_FRAME",
    "MAX_PEERS",
    "Ack",
    "Asked",
    "CancelFetch",
    "Connect",
    "Counters",
    "Delivery",
    "Failed",
    "Fetch",
    "FetchDone",
    "FetchErrorKind",
    "FetchFailure",
    "FrameDecoder",
    "HostMessage",
    "Init",
    "ParentMessage",
    "PeerReport",
    "PeerStats",
    "Publish",
    "Ready",
    "Reserve",
    "Reserved",
    "Serve",
    "SetAllowedPeers",
    "Shutdown",
    "Tell",
    "Unserve",
    "blob_path",
    "decode_host",
    "decode_parent",
    "encode_frame",
]

MAX_CONTROL_FRAME = 1 << 20
"""Largest control frame: a 4 KiB gossip message, or id lists for a few thousand peers."""
MAX_PEERS = 4096

U16 = Annotated[int, msgspec.Meta(ge=0, le=2**16 - 1)]
U64 = Annotated[int, msgspec.Meta(ge=0)]  # msgpack cannot carry more than a u64 anyway
Bytes32 = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
PeerIdText = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Text = Annotated[str, msgspec.Meta(max_length=4096)]
GossipData = Annotated[bytes, msgspec.Meta(max_length=MAX_ANNOUNCEMENT)]
PeerList = Annotated[list[PeerIdText], msgspec.Meta(max_length=MAX_PEERS)]
Seconds = Annotated[float, msgspec.Meta(gt=0.0, le=86400.0)]
RejectionName = Annotated[str, msgspec.Meta(max_length=64)]
AddrList = Annotated[list[Text], msgspec.Meta(max_length=64)]
ReachabilityText = Literal["public", "private", "unknown"]


class _Ctl(msgspec.Struct, tag=True, frozen=True, forbid_unknown_fields=True):
    pass


# ---- parent → host ---------------------------------------------------------------------------


class Init(_Ctl, frozen=True):
    secret_key: Bytes32
    run_id: Annotated[str, msgspec.Meta(max_length=256)]
    listen_host: Annotated[str, msgspec.Meta(max_length=256)]
    listen_port: U16
    blob_dir: Text
    owns_blob_dir: bool = False
    """The host deletes ``blob_dir`` when it exits, so a crashed daemon leaves no blobs in RAM."""
    log_level: int = 30


class Connect(_Ctl, frozen=True):
    """Dial these ``/…/p2p/<peer id>`` multiaddrs now and keep redialling them when dropped."""

    req_id: U64
    addrs: Annotated[list[Text], msgspec.Meta(max_length=MAX_PEERS)]


class SetAllowedPeers(_Ctl, frozen=True):
    """Replace the allow-list: gossip and blob traffic with anyone else is refused."""

    peer_ids: PeerList


class Publish(_Ctl, frozen=True):
    req_id: U64
    data: GossipData


class Tell(_Ctl, frozen=True):
    """Send ``data`` (a signed announcement) straight to each of ``peers`` over
    ``/psyche/tell/1``, not through gossip; no reply (counted in :class:`Counters`)."""

    peers: PeerList
    data: GossipData


class Serve(_Ctl, frozen=True):
    """Serve the file at ``path`` (``size`` bytes) to allowed peers asking for ``blob_hash``;
    ``handoff``: leave it to other holders after two copies (:class:`~.blobs.BlobServer`);
    ``report_askers``: say in :class:`PeerStats` which peers asked for it."""

    blob_hash: Bytes32
    path: Text
    size: U64
    handoff: bool = True
    report_askers: bool = False


class Unserve(_Ctl, frozen=True):
    blob_hash: Bytes32


class Fetch(_Ctl, frozen=True):
    """Download ``blob_hash`` from ``peers`` into the blob dir, verified, within ``timeout``."""

    req_id: U64
    blob_hash: Bytes32
    max_size: U64
    peers: PeerList
    timeout: Seconds
    attempt_timeout: Seconds
    digest: Digest = Digest.sha256
    """What ``blob_hash`` is the hash of (:mod:`psyche.p2p.digests`)."""


class CancelFetch(_Ctl, frozen=True):
    req_id: U64


class Shutdown(_Ctl, frozen=True):
    pass


class Reserve(_Ctl, frozen=True):
    """Hold circuit relay v2 reservations on these relays (``/…/p2p/<relay id>``, reached
    directly) and keep them renewed; replaces the previous set (an empty list drops them all)."""

    req_id: U64
    relay_addrs: AddrList


# ---- host → parent ---------------------------------------------------------------------------


class Ready(_Ctl, frozen=True):
    peer_id: PeerIdText
    listen_addrs: Annotated[list[Text], msgspec.Meta(max_length=64)]


class Failed(_Ctl, frozen=True):
    """The host could not start (bad Init, port in use…); it exits after sending this."""

    error: Text


class Ack(_Ctl, frozen=True):
    req_id: U64
    error: Text | None = None


class Reserved(_Ctl, frozen=True):
    """Reply to :class:`Reserve`: our circuit addresses through the relays that accepted
    (``<relay addr>/p2p-circuit/p2p/<us>``), and why the others did not."""

    req_id: U64
    circuit_addrs: AddrList
    errors: AddrList


class Delivery(_Ctl, frozen=True):
    """A gossip message from an allowed peer (``from_peer`` is its libp2p-verified origin)."""

    from_peer: PeerIdText
    data: GossipData


class FetchErrorKind(enum.Enum):
    too_large = "too_large"
    not_found = "not_found"
    timeout = "timeout"
    cancelled = "cancelled"


class FetchFailure(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    peer: PeerIdText
    reason: Text


class FetchDone(_Ctl, frozen=True):
    """Outcome of a :class:`Fetch`: a verified file at ``path``, or ``kind`` and ``error``."""

    req_id: U64
    path: Text | None
    from_peer: PeerIdText | None
    size: U64
    seconds: float
    failures: Annotated[list[FetchFailure], msgspec.Meta(max_length=4 * MAX_PEERS)]
    kind: FetchErrorKind | None = None
    error: Text | None = None

    def failed(self, blob_hash: bytes) -> FetchError:
        """The error a fetch that ended without a file raises, by its kind."""
        kind = {
            FetchErrorKind.too_large: BlobTooLarge,
            FetchErrorKind.not_found: BlobNotFound,
            FetchErrorKind.timeout: FetchTimeout,
        }.get(self.kind or FetchErrorKind.timeout, FetchError)
        failures = [(f.peer, f.reason) for f in self.failures]
        return kind(f"fetch of blob {blob_hash.hex()[:16]}: {self.error}", failures)


class PeerReport(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    peer_id: PeerIdText
    connected: bool
    latency_s: float | None
    bandwidth_bps: float | None
    transfers: U64
    failures: U64
    relayed: bool = False
    """Connected only through a circuit relay (no direct connection)."""


class Counters(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Running totals since the host started."""

    published: U64 = 0
    delivered: U64 = 0
    dropped_not_allowed: U64 = 0
    dropped_oversize: U64 = 0
    dropped_overflow: U64 = 0
    """Gossip the host could not hand to the parent fast enough (logged, never silent)."""
    blobs_served: U64 = 0
    blob_requests_refused: U64 = 0
    fetches_ok: U64 = 0
    fetches_failed: U64 = 0
    rejections: Annotated[dict[RejectionName, U64], msgspec.Meta(max_length=64)] = {}
    """Peer input the host refused, by :class:`psyche.p2p.rejections.Rejection` name."""
    relayed_connections: U64 = 0
    """Connections opened through a circuit relay, by us or to us."""
    direct_upgrades_ok: U64 = 0
    """Relayed peers we then reached directly (DCUtR hole punch, or a plain direct dial)."""
    direct_upgrades_failed: U64 = 0
    """DCUtR hole punches this host took part in that ended without a direct connection."""
    circuits_relayed: U64 = 0
    """Circuits this host carried for other members as a relay."""
    relay_refusals: U64 = 0
    """Reservations and circuits this host's relay refused (detail in ``rejections``)."""
    told: U64 = 0
    """Announcements sent straight to a member (:class:`Tell`) and delivered, one per member."""
    told_failed: U64 = 0
    """Members of a :class:`Tell` not connected, or not reached within the send deadline."""
    told_received: U64 = 0
    """Announcements members sent straight to this host that it handed to the parent."""


class Asked(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """Peers that asked for a blob served with ``report_askers`` since the last report."""

    blob_hash: Bytes32
    peers: PeerList


class PeerStats(_Ctl, frozen=True):
    peers: Annotated[list[PeerReport], msgspec.Meta(max_length=MAX_PEERS)]
    gossip_peers: PeerList
    """Peers currently subscribed to the run's topic (the reference's gossip neighbours)."""
    counters: Counters
    observed_addrs: AddrList = []
    """Where peers on direct connections see us (identify's observed address)."""
    reachability: ReachabilityText = "unknown"
    """:func:`psyche.p2p.nat.reachability` of ``observed_addrs``."""
    circuit_addrs: AddrList = []
    """Our addresses through the relays we hold a live reservation on."""
    reservations: U64 = 0
    """Reservations other members hold on this host's relay."""
    asked: Annotated[list[Asked], msgspec.Meta(max_length=MAX_PEERS)] = []
    """New askers of ``report_askers`` blobs (at most :data:`MAX_PEERS` peers a report)."""


ParentMessage = (
    Init
    | Connect
    | SetAllowedPeers
    | Publish
    | Serve
    | Unserve
    | Fetch
    | CancelFetch
    | Shutdown
    | Reserve
    | Tell
)
HostMessage = Ready | Failed | Ack | Delivery | FetchDone | PeerStats | Reserved

decode_host: MessageDecoder[HostMessage] = MessageDecoder(
    HostMessage, ControlError, "bad frame from the p2p host"
)
"""Decode a frame the host sent (parent side)."""
decode_parent: MessageDecoder[ParentMessage] = MessageDecoder(
    ParentMessage, ControlError, "bad frame from the p2p parent"
)
"""Decode a frame the parent sent (host side)."""


def blob_path(blob_dir: Path, blob_hash: bytes) -> Path:
    """Where a verified blob lives in the shared dir (the parent's own, or a host download)."""
    return blob_dir / f"{blob_hash.hex()}.blob"


def encode_frame(msg: _Ctl) -> bytes:
    """One length-prefixed frame; refuses messages the other side would reject as oversize."""
    try:
        return encode_message_frame(msg, MAX_CONTROL_FRAME)
    except FrameError as e:
        raise ControlError(f"control {e}") from None


class FrameDecoder(framing.FrameDecoder):
    """:class:`psyche.net.framing.FrameDecoder` for control frames: faults are ControlErrors."""

    def __init__(self, max_size: int = MAX_CONTROL_FRAME) -> None:
        super().__init__(max_size)

    def feed(self, data: bytes) -> list[bytes]:
        """Raises :class:`ControlError` as soon as a header announces an oversize frame."""
        try:
            return super().feed(data)
        except FrameError as e:
            raise ControlError(f"control {e}") from None
