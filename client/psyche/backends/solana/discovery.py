"""Peer discovery on a Solana run: every client's P2P addresses in a record on the chain.

Design and the options it was chosen over: docs/solana.md, "Peer discovery on Solana". A
client writes its addresses to its own ``PeerRecord`` (the PDA ``["peer", coordinator instance,
wallet]`` of the coordinator program, written by ``set_peer_addrs``, docs/solana.md) and reads
the records of the epoch's clients with ``getMultipleAccounts``. Nothing else is needed: a joiner
that knows the RPC and the run id finds everyone. ``--bootstrap-peers`` still works beside it.

What a reader trusts, and why:

* **who wrote it**: a PDA can only be created and written by the program that owns it, and the
  program derives it from the signer of ``set_peer_addrs``; so a record read at the address
  derived from a client's wallet, owned by the coordinator program, was written by that wallet.
  The reader also checks the record names that wallet and this run.
* **whom it points at**: a record holds addresses *without* a peer id; the reader appends the
  peer id of the P2P key the coordinator lists for that wallet. So a record can only ever lead
  to its owner: the libp2p handshake (Noise) fails against anyone else, whatever IP it names.
* **how old it is**: ``updated_at`` is the chain's clock when it was written; records older
  than :data:`PEER_RECORD_TTL_S` are ignored (their client is gone or never refreshed). Clients
  rewrite theirs when their addresses change and when it is half that old.
* **where it makes us dial**: a record could send every client to addresses no peer is at, or to
  services on each reader's own machine or network (the cloud metadata address, a router). An
  address is dropped (:func:`target_refusal`) when any ``/ip4``/``/ip6`` part of it, a relay's
  included, is unspecified, link-local, broadcast, multicast or reserved, and, unless the run is
  **local**, when it is loopback, private (RFC 1918, CGNAT, IPv6 unique-local) or a DNS name.
  A run is local when its creator said so at creation: the coordinator instance's
  ``local_run`` flag, which the program applies to every ``set_peer_addrs`` by the same rules
  (so a reader only meets such targets in records written before the rules, or in a local
  run). ``create-run`` sets the flag by default when every Solana RPC endpoint it uses is on
  loopback, ``localhost`` or a private address (:func:`psyche.solana.peer_record.rpcs_are_local`):
  a chain on this machine or LAN (the local SVM, the testnets, the emulated internet) has its
  peers there too.

Bad records are counted by reason in :attr:`ChainDirectory.rejected` and logged once per
(wallet, reason); one bad record never hides the others.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from solders.pubkey import Pubkey

from psyche.net.multiaddrs import AddrError, advertised_addrs, is_circuit, peer_addr, record_addr
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.identity import NodeIdentity
from psyche.solana.peer_record import (
    DNS_PROTOCOLS,
    is_local_ip,
    never_a_peer,
    unroutable,
)
from psyche.solana.rpc import MAX_MULTIPLE_ACCOUNTS, SolanaRpc

__all__ = [
    "PEER_RECORD_TTL_S",
    "ChainDirectory",
    "PeerRecordLike",
    "target_refusal",
]

log = logging.getLogger(__name__)

PEER_RECORD_TTL_S = 24 * 3600
"""A record not rewritten for this long is ignored: a client that is still there rewrites it at
half this age, so only records of clients gone for a day (or forged clocks) fall out."""


def target_refusal(addr: str, local: bool) -> str | None:
    """Why a reader must not dial ``addr`` (any ``/ip4``, ``/ip6`` or DNS part, a relay's
    included), or None when it may. ``local``: the run's ``local_run`` flag (module
    docstring)."""
    parts = addr.split("/")
    for protocol, value in itertools.pairwise(parts):
        if protocol in DNS_PROTOCOLS and not local:
            return f"{addr!r} names a DNS host (only local runs may)"
        if protocol not in ("ip4", "ip6"):
            continue
        try:
            ip = ipaddress.ip_address(value)
        except ValueError:
            return f"{addr!r}: {value!r} is not an IP address"
        if never_a_peer(ip):
            return (
                f"{addr!r}: no peer can be at {ip} (unspecified, link-local, multicast, reserved)"
            )
        if not local and is_local_ip(ip):
            return f"{addr!r}: {ip} is loopback or private (only local runs may)"
    return None


class PeerRecordLike(Protocol):
    """The fields of a decoded ``PeerRecord`` that discovery reads."""

    @property
    def coordinator_instance(self) -> Pubkey: ...

    @property
    def signer(self) -> Pubkey: ...

    @property
    def updated_at(self) -> int: ...

    @property
    def addrs(self) -> tuple[str, ...]: ...


class ChainDirectory:
    """The daemon's ``PeerDirectory`` on a Solana run: chain records, plus bootstrap peers and
    addresses learned otherwise.

    The backend feeds it: :meth:`refresh` reads the records of the members it is given,
    :meth:`record_addrs` turns this client's listen/circuit addresses into the record it
    publishes. :meth:`peer_addrs` is synchronous (the daemon calls it at every poll) and returns
    what the last refresh found.
    """

    def __init__(
        self,
        *,
        program_id: Pubkey,
        instance: Pubkey,
        record_address: Callable[[Pubkey], Pubkey],
        decode: Callable[[bytes], PeerRecordLike],
        local: bool,
        bootstrap: dict[bytes, list[str]] | None = None,
        announce: Sequence[str] = (),
        max_addrs: int = 4,
        max_addr_len: int = 128,
        ttl_s: float = PEER_RECORD_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.program_id = program_id
        self.instance = instance
        self.record_address = record_address
        self.decode = decode
        self.local = local
        """The run's ``local_run`` flag: whether loopback, private and DNS targets are
        published and dialed (:func:`target_refusal`)."""
        self.max_addrs = max_addrs
        self.max_addr_len = max_addr_len
        self.ttl_s = ttl_s
        self.clock = clock
        self._bootstrap = {k: list(v) for k, v in (bootstrap or {}).items()}
        self.announce = list(announce)
        """``--p2p-announce-addrs``: published first, ahead of what the host listens on."""
        self._learned: dict[bytes, list[str]] = {}
        self._records: dict[bytes, list[str]] = {}
        self.record_times: dict[bytes, int] = {}
        """``updated_at`` of every record accepted, by wallet (this client's own included)."""
        self.my_addrs: list[str] = []
        self.rejected: Counter[str] = Counter()
        self._warned: set[tuple[bytes, str]] = set()

    # --- publishing ---------------------------------------------------------------------------

    def record_addrs(self, addrs: Iterable[str], p2p_identity: bytes) -> list[str]:
        """What this client's record should hold for the listen/circuit addresses ``addrs``:
        announced ones first, unspecified hosts expanded, the own peer id dropped, then relayed
        addresses (behind a NAT they are the ones that work), at most ``max_addrs`` of at most
        ``max_addr_len`` bytes. An address we could not publish is logged and left out."""
        me = peer_id_for(p2p_identity)
        out: list[str] = []
        for addr in [*self.announce, *advertised_addrs(list(addrs))]:
            try:
                short = record_addr(addr, me)
            except AddrError as e:
                log.warning("not publishing P2P address %s: %s", addr, e)
                continue
            if unroutable(short, local=self.local):
                log.warning("not publishing P2P address %s: no peer of this run can reach it", addr)
                continue
            if len(short.encode()) > self.max_addr_len:
                log.warning("not publishing P2P address %s: over %d bytes", addr, self.max_addr_len)
                continue
            if short not in out:
                out.append(short)
        announced = set(self.announce)
        out.sort(key=lambda a: (a not in announced, not is_circuit(a)))
        self.my_addrs = [peer_addr(a, me) for a in out[: self.max_addrs]]
        return out[: self.max_addrs]

    # --- reading ------------------------------------------------------------------------------

    async def refresh(self, rpc: SolanaRpc, members: Sequence[NodeIdentity]) -> int:
        """Read the records of ``members`` (by wallet) and keep what passes the checks; returns
        how many members have an address now. RPC errors propagate (the caller retries)."""
        members = list({m.signer: m for m in members}.values())
        found: dict[bytes, list[str]] = {}
        for start in range(0, len(members), MAX_MULTIPLE_ACCOUNTS):
            chunk = members[start : start + MAX_MULTIPLE_ACCOUNTS]
            keys = [self.record_address(Pubkey.from_bytes(m.signer)) for m in chunk]
            accounts = await rpc.get_multiple_accounts(keys)
            for member, account in zip(chunk, accounts, strict=True):
                if account is None:
                    continue
                addrs = self.accept(member, *account)
                if addrs:
                    found[member.p2p_identity] = addrs
        self._records = found
        return len(found)

    def accept(self, member: NodeIdentity, owner: Pubkey, data: bytes) -> list[str]:
        """The dialable addresses in ``member``'s record (owner and bytes as read), or [] when
        the record is rejected (counted and logged once per wallet and reason)."""
        if owner != self.program_id:
            return self._reject(member, "owner", f"owned by {owner}, not the coordinator program")
        try:
            record = self.decode(data)
        except ValueError as e:
            return self._reject(member, "undecodable", str(e))
        if bytes(record.signer) != member.signer:
            return self._reject(member, "signer", "the record names another wallet")
        if record.coordinator_instance != self.instance:
            return self._reject(member, "run", "the record belongs to another run")
        age = self.clock() - record.updated_at
        if age > self.ttl_s:
            return self._reject(member, "stale", f"last written {age / 3600:.1f} h ago")
        self.record_times[member.signer] = record.updated_at
        peer = peer_id_for(member.p2p_identity)
        out: list[str] = []
        for addr in record.addrs[: self.max_addrs]:
            try:
                full = peer_addr(addr, peer)
            except AddrError as e:
                self._reject(member, "address", str(e))
                continue
            refusal = target_refusal(addr, self.local)
            if refusal is not None:
                self._reject(member, "target", refusal)
                continue
            out.append(full)
        return out

    def _reject(self, member: NodeIdentity, reason: str, detail: str) -> list[str]:
        self.rejected[reason] += 1
        if (member.signer, reason) not in self._warned:
            self._warned.add((member.signer, reason))
            log.warning("peer record of %s rejected: %s", Pubkey.from_bytes(member.signer), detail)
        return []

    # --- PeerDirectory ------------------------------------------------------------------------

    def learn(self, key: bytes, addrs: Iterable[str]) -> None:
        """Addresses of P2P key ``key`` learned outside the chain (full ``…/p2p/<id>`` form)."""
        known = self._learned.setdefault(bytes(key), [])
        known.extend(a for a in addrs if a not in known)

    def peer_addrs(self) -> dict[bytes, list[str]]:
        out: dict[bytes, list[str]] = {}
        for source in (self._records, self._bootstrap, self._learned):
            for key, addrs in source.items():
                known = out.setdefault(key, [])
                known.extend(a for a in addrs if a not in known)
        return out

    def known(self, key: bytes) -> bool:
        return bool(self._records.get(key) or self._bootstrap.get(key) or self._learned.get(key))
