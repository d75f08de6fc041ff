"""Whether we are behind a NAT, for the stats the parent gets (docs/p2p-nat.md, "NAT detection").

Identify runs on every connection (py-libp2p's default), and the addresses peers on direct
connections observe us at, compared with our own IPs (:func:`psyche.p2p.nat.reachability`), tell
whether our connections leave translated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from psyche.net.multiaddrs import interface_ips
from psyche.p2p.host.peers import NatReport
from psyche.p2p.host.relay import MemberRelay
from psyche.p2p.nat import ip_of, reachability

__all__ = ["NatStatus"]

log = logging.getLogger("psyche.p2p.host")


class NatStatus:
    """Our observed addresses and reachability, with our circuit addresses (``circuit_addrs``)
    and the reservations others hold on our ``relay``."""

    def __init__(
        self, host: Any, relay: MemberRelay, circuit_addrs: Callable[[], list[str]]
    ) -> None:
        self.host = host
        self.relay = relay
        self.circuit_addrs = circuit_addrs
        self._local_ips: set[str] | None = None

    def observed_addrs(self) -> list[str]:
        """Where peers on direct connections see us (identify's observed address).

        py-libp2p keeps these in its host's observed-address manager, which has no public
        accessor below its activation threshold of 4 observers (``get_addrs``); one observer
        is enough to tell a NAT, so the manager is read directly."""
        manager = getattr(self.host, "_observed_addr_manager", None)
        if manager is None:
            return []
        try:
            return sorted({str(a) for a in manager.addrs(min_observers=1)})
        except Exception as e:
            log.debug("reading observed addresses failed: %s", e)
            return []

    def local_ips(self) -> set[str]:
        """The IPs we listen on; a wildcard listener counts every interface's."""
        if self._local_ips is None:
            ips = {ip for a in self.host.get_transport_addrs() if (ip := ip_of(str(a)))}
            if ips & {"0.0.0.0", "::"}:
                ips |= set(interface_ips())
            self._local_ips = ips
        return self._local_ips

    def report(self) -> NatReport:
        observed = self.observed_addrs()
        return NatReport(
            observed_addrs=observed[:64],
            reachability=reachability(observed, self.local_ips()),
            circuit_addrs=self.circuit_addrs()[:64],
            reservations=self.relay.reservations(),
        )
