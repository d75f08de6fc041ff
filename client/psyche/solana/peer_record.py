"""Peer records: the P2P addresses a wallet publishes for a run (docs/solana.md, "Programs").

The coordinator program keeps one ``PeerRecord`` per (run, wallet) at the PDA
``["peer", coordinator_instance, wallet]``
(:func:`~psyche.solana.instructions.peer_record_pda`), written by the wallet with
``set_peer_addrs`` and closed with ``close_peer_record`` (instructions built by
:class:`~psyche.solana.instructions.RunInstructions`). A client that knows the RPC and
the run id reads the records of the run's clients with ``getMultipleAccounts`` and decodes each
with :func:`decode_peer_record`.

API:

* ``decode_peer_record(idl, data)``: ``idl`` is the coordinator program's
  :class:`~psyche.solana.idl.IdlCodec` (what :class:`CoordinatorLayout` is built from;
  from a ``ProgramClient`` pass ``program.idl``), ``data`` the account's bytes. It checks the
  size (:data:`PEER_RECORD_SPACE`), the discriminator and the stored addresses
  (:func:`check_peer_addrs`) and raises :class:`PeerRecordError` (a ``ValueError``) for anything
  else: account data is untrusted input. Bytes after the borsh value are ignored (an overwrite
  with fewer addresses leaves the old ones there). The caller should still read only accounts
  the coordinator program owns at the PDA it derived, and may compare ``signer`` and
  ``coordinator_instance`` with what it asked for.
* ``check_peer_addrs(addrs, local=...)``: the program's rules, in its order
  (``core/peer_addrs.rs``), for a run whose ``local_run`` flag is ``local``, so a client fails
  before sending; raises :class:`PeerAddrError` naming the error the program would return.
* :data:`MAX_PEER_ADDRS`, :data:`MAX_PEER_ADDR_LEN`: the program's limits (``constants.rs``),
  defined here once for the Python side; the tests check them against the IDL's constants and
  the vectors the program wrote.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from solders.pubkey import Pubkey

from psyche.solana.errors import ChainError
from psyche.solana.idl import IdlCodec, IdlError

__all__ = [
    "MAX_PEER_ADDRS",
    "MAX_PEER_ADDR_LEN",
    "PEER_RECORD_SPACE",
    "PeerAddrError",
    "PeerRecord",
    "PeerRecordError",
    "check_peer_addrs",
    "decode_peer_record",
    "is_local_ip",
    "never_a_peer",
    "rpcs_are_local",
    "unroutable",
]

ACCOUNT = "PeerRecord"
MAX_PEER_ADDRS = 4
"""Most addresses one record holds."""
MAX_PEER_ADDR_LEN = 128
"""Longest address, in bytes."""
PEER_RECORD_SPACE = 8 + 32 + 32 + 1 + 8 + 8 + 4 + MAX_PEER_ADDRS * (4 + MAX_PEER_ADDR_LEN)
"""Account size, discriminator included (621 bytes): room for the longest content. Rent-exempt
deposit (128 + 621) × 6960 = 5,213,040 lamports, paid by the wallet on its first
``set_peer_addrs`` and returned by ``close_peer_record``."""


class PeerRecordError(ChainError, ValueError):
    """Account bytes that are not a peer record this client can read."""


class PeerAddrError(ChainError, ValueError):
    """An address list the program would refuse; ``error`` is the program's error name."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class PeerRecord:
    """A decoded ``PeerRecord`` (field order and names as in the program)."""

    coordinator_instance: Pubkey
    signer: Pubkey
    bump: int
    updated_at: int
    """Cluster unix time of the last ``set_peer_addrs``."""
    updated_slot: int
    """Cluster slot of the last ``set_peer_addrs``."""
    addrs: tuple[str, ...]
    """0 to 4 multiaddrs; empty: no address right now."""


def never_a_peer(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """The program's target rule for every run (``core/peer_addrs.rs``): no peer is ever at
    ``ip`` — unspecified (0.0.0.0/8, ::), link-local, multicast, broadcast or reserved
    (240.0.0.0/4); an IPv4-mapped IPv6 address is judged as IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        first = ip.packed[0]
        return first == 0 or first >= 240 or ip.is_link_local or ip.is_multicast
    return ip.is_unspecified or ip.is_link_local or ip.is_multicast


LOCAL_NETS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "::1/128",
        "fc00::/7",
        "fec0::/10",
    )
)
"""Loopback, private (RFC 1918), CGNAT, IPv6 unique-local and site-local: targets on a
reader's own machine or network, only for local runs (``core/peer_addrs.rs``)."""

DNS_PROTOCOLS = frozenset({"dns", "dns4", "dns6", "dnsaddr"})


def is_local_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``ip`` is in :data:`LOCAL_NETS` (an IPv4-mapped IPv6 address judged as IPv4)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in LOCAL_NETS if net.version == ip.version)


def rpcs_are_local(urls: Iterable[str]) -> bool:
    """Whether a chain reached through the RPC endpoints ``urls`` is on this machine or LAN:
    each host is ``localhost`` or a loopback or private IP (at least one endpoint).
    ``create-run``'s default for the run's ``local_run`` flag."""
    hosts = [urlsplit(u).hostname for u in urls]
    if not hosts:
        return False
    for host in hosts:
        if host is None:
            return False
        if host == "localhost":
            continue
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        if not is_local_ip(ip):
            return False
    return True


def unroutable(addr: str, *, local: bool) -> bool:
    """Whether the program refuses ``addr`` for its targets (``PeerAddrUnroutable``) in a run
    whose ``local_run`` is ``local``: an ``/ip4/`` or ``/ip6/`` value anywhere in it that is not
    an IP of that family's syntax or one :func:`never_a_peer` holds for, or, unless ``local``,
    a loopback or private IP (:func:`is_local_ip`) or a DNS protocol."""
    parts = iter(addr.split("/"))
    for protocol in parts:
        # As the program: a DNS protocol's value is not skipped, only an IP's.
        if protocol in DNS_PROTOCOLS and not local:
            return True
        if protocol not in ("ip4", "ip6"):
            continue
        value = next(parts, None)
        # Rust's parser, which the program uses, knows no IPv6 zone ("%eth0").
        if value is None or "%" in value:
            return True
        try:
            ip = (ipaddress.IPv4Address if protocol == "ip4" else ipaddress.IPv6Address)(value)
        except ValueError:
            return True
        if never_a_peer(ip) or (not local and is_local_ip(ip)):
            return True
    return False


def check_peer_addrs(addrs: Sequence[str], *, local: bool) -> None:
    """Raise :class:`PeerAddrError` unless the program accepts ``addrs`` in a run whose
    ``local_run`` is ``local``: at most :data:`MAX_PEER_ADDRS`; each, in order, 1 to
    :data:`MAX_PEER_ADDR_LEN` bytes (UTF-8), only printable ASCII without the space
    (0x21-0x7e), starting with ``/``, with no target :func:`unroutable` refuses. The addresses
    are otherwise not parsed as multiaddrs (nor does the program parse them)."""
    if isinstance(addrs, str | bytes):
        raise TypeError("addrs is a sequence of multiaddr strings, not one string")
    if len(addrs) > MAX_PEER_ADDRS:
        raise PeerAddrError(
            "TooManyPeerAddrs", f"{len(addrs)} peer addresses, at most {MAX_PEER_ADDRS}"
        )
    for i, addr in enumerate(addrs):
        if not isinstance(addr, str):
            raise TypeError(f"peer address {i} is a {type(addr).__name__}, not a str")
        raw = addr.encode()
        if not 1 <= len(raw) <= MAX_PEER_ADDR_LEN:
            raise PeerAddrError(
                "PeerAddrBadLength",
                f"peer address {i} is {len(raw)} bytes, must be 1 to {MAX_PEER_ADDR_LEN}: {addr!r}",
            )
        bad = next((b for b in raw if not 0x21 <= b <= 0x7E), None)
        if bad is not None:
            raise PeerAddrError(
                "PeerAddrNotPrintable",
                f"peer address {i} holds byte 0x{bad:02x} (only printable ASCII without spaces, "
                f"0x21-0x7e): {addr!r}",
            )
        if raw[0] != ord("/"):
            raise PeerAddrError(
                "PeerAddrNoLeadingSlash", f"peer address {i} does not start with '/': {addr!r}"
            )
        if unroutable(addr, local=local):
            scope = "" if local else "; loopback, private and DNS targets only in a local run"
            raise PeerAddrError(
                "PeerAddrUnroutable",
                f"peer address {i} names an IP no peer can be at (unspecified, link-local, "
                f"broadcast, multicast, reserved) or a bad IP{scope}: {addr!r}",
            )


def decode_peer_record(idl: IdlCodec, data: bytes | bytearray | memoryview) -> PeerRecord:
    """The record in ``data`` (a ``PeerRecord`` account's bytes), read with the coordinator's
    IDL ``idl``. Raises :class:`PeerRecordError` on anything that is not a valid record."""
    if ACCOUNT not in idl.account_discriminators:
        raise PeerRecordError(f"the IDL has no {ACCOUNT} account (an IDL older than peer records)")
    data = bytes(data)
    if len(data) != PEER_RECORD_SPACE:
        raise PeerRecordError(f"peer record is {len(data)} bytes, expected {PEER_RECORD_SPACE}")
    try:
        raw = idl.decode_account(ACCOUNT, data)
    except (IdlError, struct.error, IndexError, UnicodeDecodeError) as e:
        raise PeerRecordError(f"not a readable peer record: {e}") from None
    try:
        addrs = tuple(raw["addrs"])
        # The loosest rule the program applies (a local run's); readers judge the targets by
        # their run's flag afterwards.
        check_peer_addrs(addrs, local=True)
        return PeerRecord(
            coordinator_instance=Pubkey.from_bytes(raw["coordinator_instance"]),
            signer=Pubkey.from_bytes(raw["signer"]),
            bump=int(raw["bump"]),
            updated_at=int(raw["updated_at"]),
            updated_slot=int(raw["updated_slot"]),
            addrs=addrs,
        )
    except PeerAddrError as e:
        raise PeerRecordError(f"the stored addresses break the program's rules: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise PeerRecordError(f"not a readable peer record: {e}") from None
