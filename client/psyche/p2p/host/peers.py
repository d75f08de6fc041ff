"""Per-peer latency and bandwidth, and the order in which to ask peers for a blob.

See docs/protocol.md, "P2P model sharing".

The host process measures every peer it talks to: round-trip time from a small ping protocol
(a few peers every few seconds, in rotation: :class:`PingRotation`), and throughput from every
blob it downloads. A download asks peers in the reference's order: peers with a measured
bandwidth above zero first (fastest first), then peers never measured, then peers whose last
transfer failed (bandwidth recorded as 0); latency breaks ties, and the caller's own order
breaks the rest. Asking unmeasured peers before failed ones
means a new peer gets a chance, and a peer that served garbage or died mid-transfer is tried
only after everyone else.

Measurements are exponentially weighted so one slow transfer does not exile a good peer. This
module is pure (no clock, no I/O) so ordering is unit-tested without a network.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from psyche.p2p.control import Asked, Counters, PeerReport, PeerStats
from psyche.p2p.nat import Reachability

__all__ = [
    "EWMA_WEIGHT",
    "PINGS_PER_INTERVAL",
    "RELAYED_EVERY",
    "HostCounters",
    "NatReport",
    "PeerStat",
    "PeerTable",
    "PingRotation",
    "peer_stats",
]

EWMA_WEIGHT = 0.3
"""Weight of a new sample in the running latency and bandwidth averages."""


@dataclass(slots=True)
class PeerStat:
    """What we know about one peer's link."""

    latency_s: float | None = None
    """Smoothed round-trip time of the ping protocol; ``None`` until measured."""
    bandwidth_bps: float | None = None
    """Smoothed download rate in bytes/s; ``None`` until a transfer, ``0.0`` after a failure."""
    transfers: int = 0
    failures: int = 0


def _ewma(old: float | None, new: float) -> float:
    if old is None or old == 0.0:
        return new
    return (1.0 - EWMA_WEIGHT) * old + EWMA_WEIGHT * new


class PeerTable:
    """Measurements keyed by peer id (base58 text)."""

    def __init__(self) -> None:
        self._stats: dict[str, PeerStat] = {}

    def get(self, peer: str) -> PeerStat:
        return self._stats.get(peer) or PeerStat()

    def _entry(self, peer: str) -> PeerStat:
        stat = self._stats.get(peer)
        if stat is None:
            stat = self._stats[peer] = PeerStat()
        return stat

    def record_latency(self, peer: str, seconds: float) -> None:
        stat = self._entry(peer)
        stat.latency_s = _ewma(stat.latency_s, max(seconds, 0.0))

    def record_transfer(self, peer: str, nbytes: int, seconds: float) -> None:
        """A verified download of ``nbytes`` that took ``seconds`` (request to last byte)."""
        stat = self._entry(peer)
        # A floor on the duration keeps tiny transfers from producing absurd rates.
        stat.bandwidth_bps = _ewma(stat.bandwidth_bps, nbytes / max(seconds, 1e-3))
        stat.transfers += 1

    def record_failure(self, peer: str) -> None:
        """A failed, forged, truncated or timed-out transfer: ask this peer last from now on."""
        stat = self._entry(peer)
        stat.bandwidth_bps = 0.0
        stat.failures += 1

    def order(self, peers: Sequence[str]) -> list[str]:
        """``peers`` without duplicates, best first (see the module docstring)."""

        def key(item: tuple[int, str]) -> tuple[int, float, float, int]:
            index, peer = item
            stat = self._stats.get(peer)
            bandwidth = stat.bandwidth_bps if stat else None
            latency = stat.latency_s if stat and stat.latency_s is not None else math.inf
            if bandwidth is None:
                return (1, 0.0, latency, index)
            if bandwidth > 0.0:
                return (0, -bandwidth, latency, index)
            return (2, 0.0, latency, index)

        unique = list(dict.fromkeys(peers))
        return [peer for _, peer in sorted(enumerate(unique), key=key)]

    def retain(self, peers: Iterable[str]) -> None:
        """Forget every peer not in ``peers`` (keeps the table bounded as epochs change)."""
        keep = set(peers)
        for peer in [p for p in self._stats if p not in keep]:
            del self._stats[peer]

    def snapshot(self) -> dict[str, PeerStat]:
        return {
            peer: PeerStat(s.latency_s, s.bandwidth_bps, s.transfers, s.failures)
            for peer, s in self._stats.items()
        }


PINGS_PER_INTERVAL = 2
"""Peers a host pings per ping interval, whatever the run's size (:class:`PingRotation`).
Two, not eight as until 2026-12-06: with eight, pings (each a new stream, both ends) were
about two thirds of an idle host's CPU, and every second a round lasts a host pays it."""
RELAYED_EVERY = 4
"""A peer reached only through a relay is pinged at least every this many intervals (12 s),
beyond ``per_interval``: a relay resets a circuit that carries no byte for 20 s
(``RelayLimits.circuit_idle_seconds``)."""


class PingRotation:
    """Which connected peers to ping this interval: at most ``per_interval`` of them, those
    pinged longest ago first (never pinged before all others, then by peer id).

    Why not every peer every interval: each ping opens a stream (multistream negotiation, Noise
    and Yamux frames in Python), so pinging all peers made a host's background work grow with
    the run — 5 % of a host's CPU at 16 hosts, about 85 streams a second each way at 256 — for a
    figure that only breaks ties in the fetch order. Rotating keeps it constant per host and
    refreshes every peer's latency once every ``⌈n / per_interval⌉`` intervals. Relayed peers
    are the exception (:data:`RELAYED_EVERY`): their pings keep the circuit alive."""

    def __init__(self, per_interval: int = PINGS_PER_INTERVAL) -> None:
        if per_interval < 1:
            raise ValueError("per_interval must be ≥ 1")
        self.per_interval = per_interval
        self._last: dict[str, int] = {}
        self._interval = 0

    def due(self, peers: Iterable[str], relayed: Iterable[str] = ()) -> list[str]:
        """The peers to ping now, and the interval counted as theirs: the ``relayed`` ones not
        pinged for :data:`RELAYED_EVERY` intervals, then ``per_interval`` others; forgets peers
        no longer passed (so the record stays bounded by the connected peers)."""
        self._interval += 1
        current = set(peers)
        self._last = {p: t for p, t in self._last.items() if p in current}
        stale = self._interval - RELAYED_EVERY
        keep_alive = sorted(
            p for p in current.intersection(relayed) if self._last.get(p, 0) <= stale
        )
        rest = sorted(current.difference(keep_alive), key=lambda p: (self._last.get(p, 0), p))
        chosen = keep_alive + rest[: self.per_interval]
        for peer in chosen:
            self._last[peer] = self._interval
        return chosen


@dataclass(slots=True)
class HostCounters:
    """Mutable twin of :class:`psyche.p2p.control.Counters`, updated by the host's tasks."""

    published: int = 0
    delivered: int = 0
    dropped_not_allowed: int = 0
    dropped_oversize: int = 0
    dropped_overflow: int = 0
    blobs_served: int = 0
    blob_requests_refused: int = 0
    fetches_ok: int = 0
    fetches_failed: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    """The host's :meth:`psyche.p2p.rejections.Rejections.counts`, refreshed before each report."""
    relayed_connections: int = 0
    direct_upgrades_ok: int = 0
    direct_upgrades_failed: int = 0
    circuits_relayed: int = 0
    relay_refusals: int = 0
    told: int = 0
    told_failed: int = 0
    told_received: int = 0


def peer_stats(
    table: PeerTable,
    connected: Iterable[str],
    gossip_peers: list[str],
    counters: HostCounters,
    *,
    relayed: Iterable[str] = (),
    nat: NatReport | None = None,
    asked: Iterable[tuple[bytes, list[str]]] = (),
) -> PeerStats:
    """The periodic report the host sends its parent; ``relayed`` are the connected peers
    reached only through a circuit relay; ``asked`` the new askers of tracked blobs."""
    connected = set(connected)
    relayed = set(relayed) & connected
    snapshot = table.snapshot()
    reports = [
        PeerReport(
            peer,
            peer in connected,
            s.latency_s,
            s.bandwidth_bps,
            s.transfers,
            s.failures,
            peer in relayed,
        )
        for peer, s in sorted(snapshot.items())
    ]
    reports += [
        PeerReport(p, True, None, None, 0, 0, p in relayed)
        for p in sorted(connected - set(snapshot))
    ]
    nat = nat or NatReport()
    return PeerStats(
        peers=reports,
        gossip_peers=gossip_peers,
        counters=Counters(**asdict(counters)),
        observed_addrs=nat.observed_addrs,
        reachability=nat.reachability,
        circuit_addrs=nat.circuit_addrs,
        reservations=nat.reservations,
        asked=[Asked(blob_hash, peers) for blob_hash, peers in asked],
    )


@dataclass(slots=True)
class NatReport:
    """The NAT part of a :class:`PeerStats` report (see :mod:`psyche.p2p.nat`)."""

    observed_addrs: list[str] = field(default_factory=list)
    reachability: Reachability = "unknown"
    circuit_addrs: list[str] = field(default_factory=list)
    reservations: int = 0
