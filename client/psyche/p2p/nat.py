"""NAT traversal rules that need no network: relay limits and admission, circuit addresses, and
the reachability verdict (pure; used by the host process, unit-tested without libp2p).

See docs/p2p-nat.md. Every host offers circuit relay v2 (the "hop" role) to the run's members
with the bounded resources of :class:`RelayLimits`; :class:`RelayAdmission` decides who may
reserve a slot on it and which circuits it carries. A member behind a NAT reserves on reachable
members and publishes ``<relay addr>/p2p-circuit/p2p/<me>`` (:func:`circuit_addr`); whether it
is behind a NAT comes from the addresses its peers observe it at (:func:`reachability`).
"""

from __future__ import annotations

import enum
import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from psyche.net.multiaddrs import CIRCUIT, split_peer

__all__ = [
    "CIRCUIT",
    "DEFAULT_RELAY_LIMITS",
    "CircuitAddr",
    "Reachability",
    "RelayAdmission",
    "RelayLimits",
    "RelayRefusal",
    "circuit_addr",
    "ip_of",
    "parse_circuit_addr",
    "reachability",
    "relay_of",
]

MIB = 1 << 20

Reachability = Literal["public", "private", "unknown"]


@dataclass(frozen=True, slots=True)
class RelayLimits:
    """What one host's relay service will carry for the run's members.

    A relay is a training client lending its uplink, so the bounds are small and every one of
    them is a hard cap:

    * ``max_reservations = 16`` slots in all, one per peer (py-libp2p keys reservations by peer
      id, so a second RESERVE from the same peer only refreshes its slot; the brief's bound of
      two per peer holds with one). A NAT'd member holds two reservations
      (``psyche.daemon.relaying.RELAYS``) and the daemon spreads members over relays by hash,
      so 16 slots serve a run of several dozen NAT'd members per reachable member.
    * ``max_circuits = 32`` relayed connections at once. One circuit carries a whole connection
      between two members (gossip and every blob they exchange), and hole punching replaces
      most of them within seconds, so 32 covers every pair among 8 NAT'd members with none
      upgraded.
    * Shares, so that no member can cut another off (issue 26: with a cap on the circuits a
      peer is an *end* of, one member holding 8 idle circuits to a NAT'd member locked every
      other member out of it, and four members held all 32). A member opens at most
      ``max_circuits_per_source = 8`` circuits and at most ``max_circuits_per_pair = 2`` to
      one destination (one connection, plus a redial while the relay has not yet seen the old
      one end). Nothing counts circuits *to* a destination, so what others hold never refuses
      a member its circuit to a peer. When all 32 are in use, a member holding fewer circuits
      than the largest holder less one takes the largest holder's idlest circuit
      (:meth:`RelayAdmission.fair_victim`): whoever holds its full share keeps at most that
      share while someone else is refused.
    * ``circuit_idle_seconds = 20``: a circuit that carried no byte in either direction for
      that long is reset. A live connection between members is never that quiet (the host
      pings every member every 3 s, and py-libp2p's yamux pings too); one left behind by hole
      punching, or held open by an abuser who sends nothing, frees its slot within seconds.
    * ``circuit_bytes = 256 MiB`` and ``circuit_seconds = 1800`` per circuit (both directions
      together). Our traffic between two members is gossip (a few KB a round) plus blobs of up
      to tens of MB (DisTrO payloads, model pieces): 256 MiB is a dozen of the largest, and
      half an hour is many rounds. When a cap is reached the relay resets the circuit; the
      dialling host's redial loop opens a fresh one within seconds and a blob fetch cut
      mid-way is retried from another peer or again, so a cap costs a retry, never the run.
      The caps bound what a pair can cost the relay between two admissions, and make a relayed
      connection that hole punching could not upgrade come back through admission (allow-list
      and counts) at least every half hour.
    * ``reservation_ttl = 900`` s: a reservation is renewed at half its life by its holder,
      so a member that left frees its slot within 15 minutes even if nobody removes it.
    """

    max_reservations: int = 16
    max_reservations_per_peer: int = 1
    max_circuits: int = 32
    max_circuits_per_source: int = 8
    max_circuits_per_pair: int = 2
    circuit_bytes: int = 256 * MIB
    circuit_seconds: int = 1800
    circuit_idle_seconds: int = 20
    reservation_ttl: int = 900

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) <= 0:
                raise ValueError(f"RelayLimits.{name} must be positive")
        if self.max_reservations_per_peer != 1:
            # py-libp2p's resource manager holds one reservation per peer id; anything else
            # would be a promise this relay cannot keep.
            raise ValueError("a relay holds exactly one reservation per peer")
        if not self.max_circuits_per_pair <= self.max_circuits_per_source <= self.max_circuits:
            raise ValueError(
                "need max_circuits_per_pair <= max_circuits_per_source <= max_circuits"
            )


DEFAULT_RELAY_LIMITS = RelayLimits()


class RelayRefusal(enum.Enum):
    """Why the relay refused a request (mapped to a circuit v2 status code by the host)."""

    not_member = "not_member"
    """The requester (or, for a circuit, its destination) is not in the allow-list."""
    impersonation = "impersonation"
    """A RESERVE naming a peer other than the authenticated sender."""
    no_reservation = "no_reservation"
    too_many_reservations = "too_many_reservations"
    too_many_circuits = "too_many_circuits"
    """Every circuit is in use and the requester already holds its fair share of them."""
    too_many_source_circuits = "too_many_source_circuits"
    too_many_pair_circuits = "too_many_pair_circuits"
    self_circuit = "self_circuit"


class RelayAdmission:
    """Admission and bookkeeping for one relay (peer ids as base58 text).

    ``is_allowed`` is read at every decision, so a new allow-list applies to the next request;
    circuits already open run until their caps. Circuits are counted by the member that opened
    them (the source) and by (source, destination).
    """

    def __init__(self, limits: RelayLimits, is_allowed: Callable[[str], bool]) -> None:
        self.limits = limits
        self.is_allowed = is_allowed
        self._by_source: Counter[str] = Counter()
        self._by_pair: Counter[tuple[str, str]] = Counter()
        self.open_circuits = 0
        self.circuits_total = 0
        self.refusals: Counter[RelayRefusal] = Counter()

    def reservation(
        self, sender: str, claimed: str | None, *, reserved: int, has_slot: bool
    ) -> RelayRefusal | None:
        """May ``sender`` (authenticated by Noise) reserve? ``claimed`` is the RESERVE message's
        peer field (py-libp2p would key the slot by it), ``reserved`` the slots in use and
        ``has_slot`` whether the sender already holds one (a refresh needs no new slot)."""
        refusal: RelayRefusal | None = None
        if claimed is not None and claimed != sender:
            refusal = RelayRefusal.impersonation
        elif not self.is_allowed(sender):
            refusal = RelayRefusal.not_member
        elif not has_slot and reserved >= self.limits.max_reservations:
            refusal = RelayRefusal.too_many_reservations
        return self._refused(refusal)

    def circuit(self, source: str, dest: str, *, dest_reserved: bool) -> RelayRefusal | None:
        """May ``source`` open a circuit to ``dest`` now? None also when every circuit is in use
        but :meth:`fair_victim` names a member to take one from: the relay must close one of
        that member's circuits before opening this one."""
        refusal: RelayRefusal | None = None
        if source == dest:
            refusal = RelayRefusal.self_circuit
        elif not self.is_allowed(source) or not self.is_allowed(dest):
            refusal = RelayRefusal.not_member
        elif not dest_reserved:
            refusal = RelayRefusal.no_reservation
        elif self._by_pair[source, dest] >= self.limits.max_circuits_per_pair:
            refusal = RelayRefusal.too_many_pair_circuits
        elif self._by_source[source] >= self.limits.max_circuits_per_source:
            refusal = RelayRefusal.too_many_source_circuits
        elif self.full() and self.fair_victim(source) is None:
            refusal = RelayRefusal.too_many_circuits
        return self._refused(refusal)

    def full(self) -> bool:
        return self.open_circuits >= self.limits.max_circuits

    def fair_victim(self, source: str) -> str | None:
        """The member whose circuit gives way to a new one from ``source`` when all are in use:
        the one holding the most, if it holds at least two more than ``source`` (so that after
        the exchange it still holds at least as many: nobody is pushed below a newcomer, and
        two members never take a circuit back and forth)."""
        if not self._by_source:
            return None
        top, held = self._by_source.most_common(1)[0]
        return top if held >= self._by_source[source] + 2 else None

    def opened(self, source: str, dest: str) -> None:
        self._by_source[source] += 1
        self._by_pair[source, dest] += 1
        self.open_circuits += 1
        self.circuits_total += 1

    def closed(self, source: str, dest: str) -> None:
        self._by_source[source] -= 1
        if self._by_source[source] <= 0:
            del self._by_source[source]
        self._by_pair[source, dest] -= 1
        if self._by_pair[source, dest] <= 0:
            del self._by_pair[source, dest]
        self.open_circuits -= 1

    def circuits_from(self, source: str) -> int:
        return self._by_source[source]

    def circuits_between(self, source: str, dest: str) -> int:
        return self._by_pair[source, dest]

    def _refused(self, refusal: RelayRefusal | None) -> RelayRefusal | None:
        if refusal is not None:
            self.refusals[refusal] += 1
        return refusal


# ---- addresses -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CircuitAddr:
    """``<relay addr>/p2p/<relay>/p2p-circuit/p2p/<dest>`` taken apart."""

    relay_addr: str
    """The relay's own full address, ending ``/p2p/<relay>``."""
    relay: str
    dest: str


def relay_of(addr: str) -> tuple[str, str]:
    """A relay's direct address → (address, relay peer id). Raises ``ValueError`` unless the
    address ends in ``/p2p/<id>`` and is not itself relayed."""
    if CIRCUIT in addr:
        raise ValueError(f"{addr!r}: a relay must be reached directly, not through a circuit")
    head, relay = split_peer(addr)
    if relay is None or not head.startswith("/"):
        raise ValueError(f"{addr!r}: a relay address must end in /p2p/<relay id>")
    return addr, relay


def circuit_addr(relay_addr: str, me: str) -> str:
    """The address at which ``me`` is reachable through the relay at ``relay_addr``."""
    _, relay = relay_of(relay_addr)
    if relay == me:
        raise ValueError("a peer cannot relay for itself")
    return f"{relay_addr}{CIRCUIT}/p2p/{me}"


def parse_circuit_addr(addr: str) -> CircuitAddr | None:
    """The parts of a circuit address, None for a direct one; ``ValueError`` when malformed."""
    if CIRCUIT not in addr:
        return None
    relay_part, sep, rest = addr.partition(CIRCUIT)
    head, dest = split_peer(rest)
    if not sep or head or dest is None or rest != f"/p2p/{dest}":
        raise ValueError(f"{addr!r}: a circuit address ends in /p2p-circuit/p2p/<peer id>")
    relay_addr, relay = relay_of(relay_part)
    if relay == dest:
        raise ValueError(f"{addr!r}: a peer cannot relay for itself")
    return CircuitAddr(relay_addr, relay, dest)


def ip_of(addr: str) -> str | None:
    """The IP address an ``/ip4/…`` or ``/ip6/…`` multiaddr starts with, else None."""
    parts = addr.split("/")
    if len(parts) < 3 or parts[0] != "" or parts[1] not in ("ip4", "ip6"):
        return None
    try:
        return str(ipaddress.ip_address(parts[2]))
    except ValueError:
        return None


def reachability(observed: Iterable[str], local_ips: Iterable[str]) -> Reachability:
    """Whether peers can dial us, judged from where they see us.

    ``observed`` are the addresses peers reported (identify's observed address) over direct
    connections; ``local_ips`` the IPs we listen on (the interfaces' for a wildcard listener).
    A peer that sees us at an IP we do not have is looking at a NAT's address: ``"private"``,
    even if other peers (on our LAN, say) see a local IP, because the internet at large sees
    the NAT. Every observation at one of our own IPs: ``"public"``. None yet: ``"unknown"``.

    ``"public"`` says our connections leave unchanged, not that a firewall lets dials in; a
    member that is wrongly judged public is simply not given a relay, and still reaches every
    reachable member itself.
    """
    mine = {str(ipaddress.ip_address(ip)) for ip in local_ips}
    seen = {ip for ip in map(ip_of, observed) if ip is not None}
    if not seen:
        return "unknown"
    return "public" if seen <= mine else "private"
