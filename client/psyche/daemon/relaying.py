"""Behind a NAT: keep circuit-relay reservations on reachable members and publish them.

A client that peers see at an address it does not have (``Transport.reachability()`` is
``"private"``) cannot be dialled. It still reaches every reachable member itself, and through
those connections it gossips, serves and fetches like anyone. What it lacks is a way for the
*other* NAT'd members to reach it: for that it reserves a slot on up to :data:`RELAYS` reachable
members (libp2p circuit relay v2, docs/p2p-nat.md) and publishes the relayed addresses through
the peer directory (the Solana peer record, or the centralized server), where other members
find and dial them; the transport then tries to upgrade a relayed connection to a direct one
(DCUtR).

Which members relay: the reachable ones (a direct address, and no relayed one) in an order that is
a hash of (this client, member), so the NAT'd clients of a run spread over the relays instead of
all picking the same one. The reservation is renewed by the transport; this keeper only
re-reserves when a relay leaves the epoch or a reservation attempt failed (after
:data:`RETRY_S`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from psyche.coordinator import Coordinator
from psyche.net.multiaddrs import is_circuit
from psyche.p2p.nat import parse_circuit_addr
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.transport import Transport

__all__ = ["RELAYS", "RETRY_S", "RelayKeeper"]

log = logging.getLogger(__name__)

RELAYS = 2
"""Reservations kept at once: one relay leaving must not cut a NAT'd client off."""
RETRY_S = 10.0


class _Directory(Protocol):
    async def publish_p2p_addrs(self, addrs: list[str]) -> None: ...

    def peer_addrs(self) -> dict[bytes, list[str]]: ...


class RelayKeeper:
    """Polled by the round engine; does nothing unless the transport says we are NAT'd."""

    def __init__(
        self,
        transport: Transport,
        directory: _Directory,
        me: bytes,
        *,
        relays: int = RELAYS,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.directory = directory
        self.me = me
        self.relays = relays
        self.retry_s = retry_s
        self.clock = clock
        self.held: list[bytes] = []
        """P2P keys of the members we hold reservations on."""
        self.circuit_addrs: list[str] = []
        self._next_try = 0.0
        self._task: asyncio.Task[None] | None = None

    def candidates(self, members: Sequence[bytes]) -> list[tuple[bytes, list[str]]]:
        """Members with a direct address and no relayed one (a member publishing relayed
        addresses is NAT'd itself): those we reach directly first, each group in this client's
        own hash order."""
        known = self.directory.peer_addrs()
        out = [
            (key, addrs)
            for key in members
            if key != self.me
            and (addrs := known.get(key, []))
            and not any(is_circuit(a) for a in addrs)
        ]
        # Members we already reach directly first: a member known only by a private address
        # (NAT'd, its relayed addresses not published yet) would cost a reservation attempt's
        # whole timeout before the circuits are published.
        direct = self.transport.direct_peers()
        out.sort(
            key=lambda kv: (
                peer_id_for(kv[0]) not in direct,
                hashlib.sha256(self.me + kv[0]).digest(),
            )
        )
        return out

    def poll(self, coord: Coordinator) -> None:
        if self._task is not None and not self._task.done():
            return
        if self.transport.reachability() != "private":
            return
        members = [c.id.p2p_identity for c in coord.epoch_state.clients]
        if self.held and all(k in members for k in self.held):
            return
        now = self.clock()
        if now < self._next_try:
            return
        picked = self.candidates(members)[: self.relays]
        if not picked:
            return
        self._next_try = now + self.retry_s
        self._task = asyncio.ensure_future(self._reserve(picked))

    async def _reserve(self, picked: list[tuple[bytes, list[str]]]) -> None:
        addrs = [a for _, direct in picked for a in direct]
        try:
            circuits = await self.transport.reserve(addrs)
        except Exception as e:  # a failed reservation is retried later; it must not end the run
            log.warning("relay reservation failed: %s", e)
            return
        if not circuits:
            log.warning("no relay accepted a reservation (tried %d members)", len(picked))
            return
        held = {c.relay for c in map(parse_circuit_addr, circuits) if c is not None}
        self.held = [k for k, _ in picked if peer_id_for(k) in held]
        self.circuit_addrs = circuits
        log.info("behind a NAT: reachable through %s", " ".join(circuits))
        await self.directory.publish_p2p_addrs([*circuits, *self.transport.listen_addrs])

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
