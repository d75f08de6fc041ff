"""DCUtR in the host process (trio + libp2p): py-libp2p's hole punching over a relayed
connection, then a direct connection that new streams prefer, answering members only and counting
outcomes (docs/p2p-nat.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import multiaddr
from libp2p.abc import IHost, INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol

from psyche.p2p.host.relay import reset_stream

__all__ = ["CountingDCUtR"]

log = logging.getLogger("psyche.p2p.host")


class CountingDCUtR(DCUtRProtocol):
    """py-libp2p's DCUtR, for members only, counting what it achieves.

    ``punches_ok``/``punches_failed`` count hole punches this host took part in (both ends of
    one attempt count it, each on its own side); ``direct_dials_ok`` counts relayed peers that a
    plain direct dial reached (DCUtR tries that first, and it succeeds when the peer turned out
    to be reachable).
    """

    def __init__(self, host: IHost, is_allowed: Callable[[str], bool]) -> None:
        super().__init__(host)
        self.is_allowed = is_allowed
        self.punches_ok = 0
        self.punches_failed = 0
        self.direct_dials_ok = 0

    async def _handle_dcutr_stream(self, stream: INetStream) -> None:
        # A peer that could open this stream could make us dial any address it lists.
        if not self.is_allowed(stream.muxed_conn.peer_id.to_base58()):
            await reset_stream(stream)
            return
        await super()._handle_dcutr_stream(stream)

    async def _try_unilateral_upgrade(self, peer_id: ID) -> bool:
        ok = await super()._try_unilateral_upgrade(peer_id)
        if ok:
            self.direct_dials_ok += 1
        return ok

    async def _perform_hole_punch(
        self, peer_id: ID, addrs: list[multiaddr.Multiaddr], as_responder: bool = False
    ) -> bool:
        ok = False
        try:
            ok = await super()._perform_hole_punch(peer_id, addrs, as_responder)
        finally:
            if ok:
                self.punches_ok += 1
            else:
                self.punches_failed += 1
        log.info(
            "hole punch with %s (%s): %s",
            peer_id,
            "we initiated the DCUtR exchange" if as_responder else "the peer initiated it",
            "direct connection" if ok else "failed",
        )
        return ok
