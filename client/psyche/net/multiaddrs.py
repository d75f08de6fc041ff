"""libp2p multiaddrs as the client publishes and reads them, as text, without libp2p.

The asyncio side never imports libp2p (docs/p2p-nat.md, "The libp2p host process"), so the
few shapes we publish are handled here as strings:

* direct: ``/ip4/A/tcp/P`` or ``/ip6/A/tcp/P`` or ``/dns{,4,6}/NAME/tcp/P``;
* relayed: a direct address of a relay, ``/p2p/<relay id>/p2p-circuit``.

Either is followed by ``/p2p/<peer id>`` when it names a peer. In a published record (the Solana
peer record, docs/solana.md) that last part is left out: the record belongs to one key, so the
reader appends the peer id of the key it expected, and a record can only ever point at its
owner. A listener bound to ``0.0.0.0``/``::`` is published as the host's interface addresses,
loopback last and only if nothing else is there.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = [
    "CIRCUIT",
    "AddrError",
    "advertised_addrs",
    "interface_ips",
    "is_circuit",
    "peer_addr",
    "record_addr",
    "split_peer",
]

_DIRECT = re.compile(
    r"^/(?:ip4|ip6|dns|dns4|dns6)/[^/]+/tcp/(\d{1,5})$",
)
_PEER_ID = re.compile(r"^[1-9A-HJ-NP-Za-km-z]{40,64}$")
CIRCUIT = "/p2p-circuit"


class AddrError(ValueError):
    """A multiaddr that is not one of the shapes the client publishes."""


def _check_direct(addr: str) -> None:
    m = _DIRECT.match(addr)
    if m is None or not 0 < int(m.group(1)) < 65536:
        raise AddrError(f"{addr!r} is not /ip4|ip6|dns/<host>/tcp/<port>")
    kind, host = addr.split("/")[1:3]
    if kind in ("ip4", "ip6"):
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            raise AddrError(f"{addr!r}: bad IP address") from None
        if (ip.version == 4) != (kind == "ip4"):
            raise AddrError(f"{addr!r}: address family does not match {kind}")
        if ip.is_unspecified or ip.is_multicast:
            raise AddrError(f"{addr!r}: not a dialable address")


def split_peer(addr: str) -> tuple[str, str | None]:
    """``…/p2p/<id>`` → (``…``, id); anything else → (addr, None)."""
    head, sep, tail = addr.rpartition("/p2p/")
    if sep and tail and "/" not in tail:
        return head, tail
    return addr, None


def record_addr(addr: str, peer_id: str) -> str:
    """A listen or circuit address of ``peer_id`` in its published form (own suffix dropped);
    checked as the reader will check it."""
    head, pid = split_peer(addr)
    if pid is not None and pid != peer_id:
        raise AddrError(f"{addr!r} names another peer than {peer_id}")
    peer_addr(head, peer_id)
    return head


def peer_addr(addr: str, peer_id: str) -> str:
    """A published address of ``peer_id`` → the address to dial it at (``…/p2p/<peer_id>``).

    Raises :class:`AddrError` for anything else: a peer id of its own (a record may only point
    at its owner), a circuit whose relay part is not a direct address with a peer id, or not a
    multiaddr shape we dial."""
    if not _PEER_ID.match(peer_id):
        raise AddrError(f"{peer_id!r} is not a peer id")
    if not addr.isascii() or not addr.isprintable() or " " in addr:
        raise AddrError(f"{addr!r} has characters no multiaddr has")
    if addr.endswith(CIRCUIT):
        relay, relay_id = split_peer(addr[: -len(CIRCUIT)])
        if relay_id is None or not _PEER_ID.match(relay_id):
            raise AddrError(f"{addr!r}: a circuit address needs …/p2p/<relay id>/p2p-circuit")
        if relay_id == peer_id:
            raise AddrError(f"{addr!r}: a peer cannot relay for itself")
        _check_direct(relay)
    else:
        _check_direct(addr)
    return f"{addr}/p2p/{peer_id}"


def is_circuit(addr: str) -> bool:
    """Whether ``addr`` (published or full form) goes through a relay."""
    return CIRCUIT + "/" in addr or addr.endswith(CIRCUIT)


def interface_ips() -> list[str]:
    """This host's IPv4 addresses, non-loopback first (what a ``0.0.0.0`` listener is reachable
    at)."""
    import ifaddr  # small, pure Python; imported here so that importing this module stays cheap

    ips: list[str] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str) and ip.ip not in ips:
                ips.append(ip.ip)
    return sorted(ips, key=lambda a: (ipaddress.ip_address(a).is_loopback, a))


def advertised_addrs(listen_addrs: list[str], ips: list[str] | None = None) -> list[str]:
    """Listen addresses with an unspecified host (``0.0.0.0``) expanded to ``ips`` (default:
    :func:`interface_ips`); loopback kept only where nothing else is, link-local dropped."""
    out: list[str] = []
    for addr in listen_addrs:
        parts = addr.split("/")
        if len(parts) > 2 and parts[1] == "ip4" and parts[2] == "0.0.0.0":
            found = interface_ips() if ips is None else ips
            usable = [
                ip
                for ip in found
                if not ipaddress.ip_address(ip).is_link_local
                and ipaddress.ip_address(ip).version == 4
            ]
            public = [ip for ip in usable if not ipaddress.ip_address(ip).is_loopback]
            for ip in public or usable:
                out.append("/".join([*parts[:2], ip, *parts[3:]]))
        else:
            out.append(addr)
    return list(dict.fromkeys(out))
