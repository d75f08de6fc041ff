"""``host:port`` addresses as operators write them."""

from __future__ import annotations

__all__ = ["parse_address"]


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port`` → (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r} must look like host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)
