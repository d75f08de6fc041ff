"""Connections to the peers the parent names (trio).

Dials have a deadline, and a redial loop chases every peer the parent asked for, clearing
py-libp2p's 60 s failed-dial cache first (py-libp2p never redials by itself). A peer's circuit
addresses (``…/p2p/<relay>/p2p-circuit/p2p/<peer>``) are dialled through the relay
(:func:`.relay.dial_through`) once its direct addresses failed or had a second's head start
(docs/p2p-nat.md).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import multiaddr
import trio
from libp2p.connection_types import ConnectionType
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr

from psyche.p2p.control import Ack, Connect
from psyche.p2p.host.channel import ControlChannel
from psyche.p2p.host.relay import dial_through
from psyche.p2p.nat import CircuitAddr, parse_circuit_addr

__all__ = ["REDIAL_INTERVAL", "Dialer"]

log = logging.getLogger("psyche.p2p.host")

REDIAL_INTERVAL = 3.0
DIAL_TIMEOUT = 5.0
RELAY_DIAL_TIMEOUT = 15.0
"""One dial through a relay: reaching the relay, its circuit to the peer, then Noise and Yamux
over two hops."""
CIRCUIT_HEAD_START = 1.0
"""How long a peer's direct addresses get before its circuit addresses are tried as well."""


def _is_relayed(conn: Any) -> bool:
    try:
        if conn.get_connection_type() == ConnectionType.RELAYED:
            return True
        return any("/p2p-circuit" in str(a) for a in conn.get_transport_addresses())
    except Exception:
        return False


class Dialer:
    """The addresses the parent gave for each peer, and the dials to them.

    ``allowed`` returns the current allow-list: the redial loop chases only members once there
    is one, and everyone before."""

    def __init__(
        self,
        control: ControlChannel,
        host: Any,
        me: str,
        allowed: Callable[[], frozenset[str]],
    ) -> None:
        self.control = control
        self.host = host
        self.me = me
        self.allowed = allowed
        self.known: dict[str, list[multiaddr.Multiaddr]] = {}
        """Direct addresses of every peer the parent asked for."""
        self.circuits: dict[str, list[CircuitAddr]] = {}
        """Circuit addresses of those peers (dialled through their relay)."""
        self.relayed_out = 0

    async def dial(self, peer: str) -> str | None:
        """Connect to ``peer``: its direct addresses first, its circuit addresses once those
        failed or have not connected within :data:`CIRCUIT_HEAD_START` (a NAT'd peer's direct
        addresses are private and may only time out). None when connected, else every
        attempt's error."""
        if peer in self.connected():
            return None
        pid = ID.from_base58(peer)
        direct = self.known.get(peer, [])
        circuits = self.circuits.get(peer, [])
        errors: list[str] = []
        done = trio.Event()
        direct_over = trio.Event()

        async def directly() -> None:
            try:
                error = await self.dial_direct(pid, direct)
                if error is None:
                    done.set()
                    nursery.cancel_scope.cancel()  # connected: no relayed dial needed
                else:
                    errors.append(error)
            finally:
                direct_over.set()

        async def relayed() -> None:
            if direct:
                with trio.move_on_after(CIRCUIT_HEAD_START):
                    await direct_over.wait()
            for circuit in circuits:
                if done.is_set():
                    return
                error = await self.dial_circuit(pid, circuit)
                if error is None:
                    # Connected: stop waiting out a direct dial to private addresses (DCUtR
                    # tries the direct path again, properly, over the relayed connection).
                    done.set()
                    nursery.cancel_scope.cancel()
                    return
                errors.append(error)

        async with trio.open_nursery() as nursery:
            if direct or not circuits:
                nursery.start_soon(directly)
            if circuits:
                nursery.start_soon(relayed)
        return None if done.is_set() else "; ".join(errors)

    async def dial_direct(self, pid: ID, addrs: list[multiaddr.Multiaddr]) -> str | None:
        """Dial ``pid`` at its direct addresses, first clearing py-libp2p's failed-dial cache."""
        peer = pid.to_base58()
        with contextlib.suppress(Exception):
            self.host.get_network().unblock_peer(pid)
        with trio.move_on_after(DIAL_TIMEOUT):
            try:
                await self.host.connect(PeerInfo(pid, addrs))
                return None
            except Exception as e:
                return f"{peer}: {type(e).__name__}: {e}"
        return f"{peer}: no connection within {DIAL_TIMEOUT:g} s"

    async def dial_circuit(self, pid: ID, circuit: CircuitAddr) -> str | None:
        """Dial ``pid`` through the relay of ``circuit`` (:func:`.relay.dial_through`)."""
        peer = pid.to_base58()
        if circuit.relay == self.me:
            return f"{peer}: a circuit through ourselves"
        relay = info_from_p2p_addr(multiaddr.Multiaddr(circuit.relay_addr))
        with contextlib.suppress(Exception):
            self.host.get_network().unblock_peer(relay.peer_id)
        with trio.move_on_after(RELAY_DIAL_TIMEOUT):
            try:
                await dial_through(self.host, circuit, list(relay.addrs))
                self.relayed_out += 1
                log.info("connected to %s through relay %s", peer, circuit.relay)
                return None
            except Exception as e:
                return f"{peer} via relay {circuit.relay}: {type(e).__name__}: {e}"
        return f"{peer} via relay {circuit.relay}: no connection within {RELAY_DIAL_TIMEOUT:g} s"

    def connected(self) -> set[str]:
        return {p.to_base58() for p in self.host.get_connected_peers()}

    def relayed_peers(self) -> set[str]:
        """Connected peers with no direct connection (every connection goes through a relay)."""
        network = self.host.get_network()
        relayed = set()
        for pid in self.host.get_connected_peers():
            conns = network.get_connections(pid)
            if conns and all(_is_relayed(c) for c in conns):
                relayed.add(pid.to_base58())
        return relayed

    async def connect(self, req: Connect) -> None:
        errors: list[str] = []
        peers: list[str] = []
        for text in req.addrs:
            try:
                circuit = parse_circuit_addr(text)
                if circuit is not None:
                    peer = circuit.dest
                    ID.from_base58(peer)
                    if peer != self.me:
                        known = self.circuits.setdefault(peer, [])
                        if circuit not in known:
                            known.append(circuit)
                        peers.append(peer)
                    continue
                info = info_from_p2p_addr(multiaddr.Multiaddr(text))
            except Exception as e:
                errors.append(f"{text!r}: {e}")
                continue
            peer = info.peer_id.to_base58()
            if peer == self.me:
                continue
            addrs = self.known.setdefault(peer, [])
            addrs.extend(a for a in info.addrs if a not in addrs)
            peers.append(peer)
        results: list[str | None] = []

        async def one(peer: str) -> None:
            results.append(await self.dial(peer))

        async with trio.open_nursery() as nursery:
            for peer in dict.fromkeys(peers):
                nursery.start_soon(one, peer)
        errors.extend(r for r in results if r)
        await self.control.send(Ack(req.req_id, "; ".join(errors)[:4000] or None))

    async def redial_loop(self) -> None:
        while True:
            await trio.sleep(REDIAL_INTERVAL)
            connected = self.connected()
            allowed = self.allowed()
            # Peers that left the epoch are not chased; before any allow-list, everyone is.
            missing = [
                p
                for p in {**self.known, **self.circuits}
                if p not in connected and (not allowed or p in allowed)
            ]
            async with trio.open_nursery() as nursery:
                for peer in missing:
                    nursery.start_soon(self.dial, peer)
