"""Circuit relay v2 in the host process (trio + libp2p): py-libp2p's protocols,
narrowed to the run's members and bounded, and the client side written here.

See docs/p2p-nat.md. Two pieces:

* :class:`MemberRelay` is py-libp2p's :class:`CircuitV2Protocol` with the hop (relay) role on,
  where every decision goes through :class:`psyche.p2p.nat.RelayAdmission`: only members (the
  allow-list) reserve, only between members are circuits opened, and
  :class:`~psyche.p2p.nat.RelayLimits` bounds reservations, circuits, bytes and time. It also
  answers the stop role (a circuit arriving for us) for members only. It overrides the
  protocol's handlers where py-libp2p 0.8.1 has defects (docs/p2p-nat.md, "py-libp2p
  defects"): a RESERVE is keyed by the sender's authenticated id, not the id it claims; a HOP
  stream carries one exchange (the library's loop logs an error and writes a status onto a
  closed stream after every reservation and circuit); and the data pump closes only its own
  circuit's streams (the library keys circuits by peer id, so one circuit ending closed
  another circuit to the same peer). It keeps its own record of each circuit (who opened it,
  to whom, when it last carried a byte) to reset circuits idle for
  ``RelayLimits.circuit_idle_seconds`` and, when every circuit is in use, to take the idlest
  circuit of the member holding the most for a member holding fewer (fair shares,
  :meth:`~psyche.p2p.nat.RelayAdmission.fair_victim`).
* :func:`reserve_on` and :func:`dial_through` are the client side. py-libp2p's
  ``CircuitV2Transport`` is not used: its dial first retries every circuit address it ever
  stored for the destination (with an unbounded TTL) before the relay it was asked to use, and
  with the client role it makes a reservation on every relay it dials through.

Hole punching over a relayed connection is :mod:`psyche.p2p.host.hole_punch`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import multiaddr
import trio
from libp2p.abc import IHost, INetConn, INetStream
from libp2p.connection_types import ConnectionType
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage, StopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode, to_proto_status
from libp2p.relay.circuit_v2.resources import RelayLimits as LibRelayLimits
from libp2p.relay.circuit_v2.resources import RelayResourceManager
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg

from psyche.p2p.nat import CircuitAddr, RelayAdmission, RelayLimits, RelayRefusal
from psyche.p2p.rejections import Rejection, Rejections

__all__ = ["MemberRelay", "RelayError", "dial_through", "reserve_on", "reset_stream"]

log = logging.getLogger("psyche.p2p.host")

MESSAGE_TIMEOUT = 10.0
"""Deadline for one HOP or STOP message (a request or its status) to arrive."""
PUMP_CHUNK = 1 << 20
PUMP_WRITE_TIMEOUT = 30.0
"""A circuit whose reader takes longer than this to accept 1 MiB is reset (a frozen end must
not hold a relay slot until the duration cap)."""

_STATUS_FOR = {
    RelayRefusal.not_member: StatusCode.PERMISSION_DENIED,
    RelayRefusal.impersonation: StatusCode.PERMISSION_DENIED,
    RelayRefusal.self_circuit: StatusCode.PERMISSION_DENIED,
    RelayRefusal.no_reservation: StatusCode.NO_RESERVATION,
    RelayRefusal.too_many_reservations: StatusCode.RESERVATION_REFUSED,
    RelayRefusal.too_many_circuits: StatusCode.RESOURCE_LIMIT_EXCEEDED,
    RelayRefusal.too_many_source_circuits: StatusCode.RESOURCE_LIMIT_EXCEEDED,
    RelayRefusal.too_many_pair_circuits: StatusCode.RESOURCE_LIMIT_EXCEEDED,
}
_REJECTION_FOR = {
    RelayRefusal.not_member: Rejection.relay_not_member,
    RelayRefusal.impersonation: Rejection.relay_impersonation,
    RelayRefusal.self_circuit: Rejection.relay_impersonation,
}


class RelayError(Exception):
    """A relay refused or failed a reservation or a circuit."""


def _status_name(code: int) -> str:
    try:
        return StatusCode(code).name
    except ValueError:
        return f"status {code}"


def _circuit_ma(relay: ID, peer: ID) -> multiaddr.Multiaddr:
    return multiaddr.Multiaddr(f"/p2p/{relay.to_base58()}/p2p-circuit/p2p/{peer.to_base58()}")


def _tag_relayed(host: IHost, peer: ID, muxed: Any, ma: multiaddr.Multiaddr) -> None:
    """Mark the swarm connection over ``muxed`` as relayed: the generic upgrade cannot tell,
    and DCUtR and connection choice (direct preferred) read this."""
    conns = host.get_network().get_connections(peer)
    for conn in conns:
        if getattr(conn, "muxed_conn", None) is muxed:
            setter = getattr(conn, "set_transport_info", None)
            if callable(setter):
                setter([ma], ConnectionType.RELAYED)


async def _send_status(stream: INetStream, code: StatusCode, *, stop: bool = False) -> None:
    msg: Any = (
        StopMessage(type=StopMessage.STATUS, status=to_proto_status(code))
        if stop
        else HopMessage(type=HopMessage.STATUS, status=to_proto_status(code))
    )
    with trio.move_on_after(MESSAGE_TIMEOUT):
        try:
            await write_delimited_msg(stream, msg)
        except Exception as e:
            log.debug("could not send relay status %s: %s", code.name, e)


async def reset_stream(stream: INetStream | None) -> None:
    if stream is None:
        return
    try:
        await stream.reset()
    except Exception as e:
        log.debug("stream reset failed: %s", e)


@dataclass(eq=False)
class _Circuit:
    """One circuit this relay carries: its ends, its two streams, when it last moved a byte
    (trio's clock) and whether its admission slot was already given back."""

    source: str
    dest: str
    hop: INetStream
    last_active: float
    dst: INetStream | None = None
    released: bool = field(default=False)


class _Reservations(RelayResourceManager):
    """py-libp2p's reservation table, plus dropping the slots of peers that left the run."""

    def retain(self, keep: Callable[[ID], bool]) -> int:
        """Forget reservations whose peer fails ``keep``; returns how many were dropped."""
        gone = [peer for peer in self._reservations if not keep(peer)]
        for peer in gone:
            del self._reservations[peer]
        return len(gone)

    def active(self) -> int:
        """Reservations not yet expired (held by connected peers or not)."""
        self._clean_expired()
        return len(self._reservations)


class MemberRelay(CircuitV2Protocol):
    """Circuit relay v2, hop and stop roles, for members only (see the module docstring)."""

    def __init__(
        self,
        host: IHost,
        limits: RelayLimits,
        is_allowed: Callable[[str], bool],
        rejections: Rejections,
    ) -> None:
        lib_limits = LibRelayLimits(
            duration=limits.circuit_seconds,
            data=limits.circuit_bytes,
            # The library counts circuits per reservation (to its holder); ours are the only
            # counts that refuse (by source and pair), so the library's must never bind first.
            max_circuit_conns=limits.max_circuits,
            max_reservations=limits.max_reservations,
            reservation_ttl=limits.reservation_ttl,
        )
        super().__init__(host, limits=lib_limits, allow_hop=True)
        self.resource_manager: _Reservations = _Reservations(lib_limits, host)
        self.relay_limits = limits
        self.is_allowed = is_allowed
        self.admission = RelayAdmission(limits, is_allowed)
        self.rejections = rejections
        self.relayed_in = 0
        """Circuits accepted for us (stop role) and upgraded into connections."""
        self._circuits: dict[int, _Circuit] = {}
        """Open circuits by ``id()`` of their HOP stream."""
        self.reclaimed: Counter[str] = Counter()
        """Circuits this relay reset before their end: ``idle`` and ``fair_share``."""

    def retain(self) -> None:
        """Drop the reservations of peers no longer allowed (after an allow-list change)."""
        dropped = self.resource_manager.retain(lambda p: self.is_allowed(p.to_base58()))
        if dropped:
            log.info("dropped %d relay reservations of peers that left the run", dropped)

    def reservations(self) -> int:
        return self.resource_manager.active()

    def _refuse(self, refusal: RelayRefusal, peer: str, detail: str) -> StatusCode:
        kind = _REJECTION_FOR.get(refusal, Rejection.relay_over_limit)
        self.rejections.record(kind, peer, f"{refusal.value}: {detail}")
        return _STATUS_FOR[refusal]

    # ---- hop: one request per stream ---------------------------------------------------------

    async def _handle_hop_stream(self, stream: INetStream) -> None:
        """One RESERVE or CONNECT per stream (as rust-libp2p relays do), then close."""
        try:
            if any("/p2p-circuit" in str(a) for a in stream.muxed_conn.get_transport_addresses()):
                # Spec: no reservations or circuits over a relayed connection (no chains).
                await _send_status(stream, StatusCode.PERMISSION_DENIED)
                await reset_stream(stream)
                return
            with trio.fail_after(MESSAGE_TIMEOUT):
                msg = await read_delimited_msg(stream, HopMessage)
        except Exception as e:
            log.debug("bad relay request: %s", e)
            await reset_stream(stream)
            return
        if msg.type == HopMessage.RESERVE:
            await self._handle_reserve(stream, msg)
            try:
                await stream.close()
            except Exception as e:
                log.debug("closing a reservation stream failed: %s", e)
        elif msg.type == HopMessage.CONNECT:
            await self._handle_connect(stream, msg)
        else:
            await _send_status(stream, StatusCode.UNEXPECTED_MESSAGE)
            await reset_stream(stream)

    async def _handle_reserve(self, stream: INetStream, msg: HopMessage) -> None:
        sender_id = stream.muxed_conn.peer_id
        sender = sender_id.to_base58()
        claimed = None
        if msg.HasField("peer") and msg.peer.id:
            try:
                claimed = ID(msg.peer.id).to_base58()
            except Exception:
                claimed = "<malformed>"
        refusal = self.admission.reservation(
            sender,
            claimed,
            reserved=self.resource_manager.active(),
            has_slot=self.resource_manager.get_reservation(sender_id) is not None,
        )
        if refusal is not None:
            await _send_status(stream, self._refuse(refusal, sender, "reservation"))
            return
        # The library keys the slot by the message's peer field: make it the sender's own id.
        msg.peer.CopyFrom(CircuitPeerId(id=sender_id.to_bytes()))
        await super()._handle_reserve(stream, msg)

    async def _handle_connect(self, stream: INetStream, msg: HopMessage) -> None:
        source_id = stream.muxed_conn.peer_id
        source = source_id.to_base58()
        try:
            dest_id = ID(msg.peer.id)
        except Exception:
            await _send_status(stream, StatusCode.MALFORMED_MESSAGE)
            await reset_stream(stream)
            return
        dest = dest_id.to_base58()
        refusal = self.admission.circuit(
            source,
            dest,
            dest_reserved=self.resource_manager.get_reservation(dest_id) is not None,
        )
        if refusal is not None:
            await _send_status(stream, self._refuse(refusal, source, f"circuit to {dest}"))
            await reset_stream(stream)
            return
        victim = self._make_room(source)
        # Counted before the first await, so concurrent requests see this circuit.
        circuit = _Circuit(source, dest, stream, trio.current_time())
        self.admission.opened(source, dest)
        self._circuits[id(stream)] = circuit
        try:
            if victim is not None:
                await self._reset_circuit(victim)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reset_when_idle, circuit)
                await super()._handle_connect(stream, msg)
                nursery.cancel_scope.cancel()
        finally:
            self._release(circuit)

    def _make_room(self, source: str) -> _Circuit | None:
        """With every circuit in use, give back the slot of the idlest circuit of the member
        the admission names (:meth:`RelayAdmission.fair_victim`); the caller resets it."""
        if not self.admission.full():
            return None
        victim = self.admission.fair_victim(source)
        held = [c for c in self._circuits.values() if c.source == victim and not c.released]
        if not held:
            return None
        # An established circuit first (its reset ends it at once), then the longest idle.
        circuit = min(held, key=lambda c: (c.dst is None, c.last_active))
        self._release(circuit, "fair_share")
        return circuit

    def _release(self, circuit: _Circuit, reclaimed: str | None = None) -> None:
        """Give the circuit's admission slot back (once); ``reclaimed`` says why we end it."""
        if circuit.released:
            return
        circuit.released = True
        self._circuits.pop(id(circuit.hop), None)
        self.admission.closed(circuit.source, circuit.dest)
        if reclaimed is not None:
            self.reclaimed[reclaimed] += 1
            log.info(
                "relay reset the circuit %s -> %s (%s)", circuit.source, circuit.dest, reclaimed
            )

    async def _reset_when_idle(self, circuit: _Circuit) -> None:
        idle = self.relay_limits.circuit_idle_seconds
        while (left := circuit.last_active + idle - trio.current_time()) > 0:
            await trio.sleep(left)
        self._release(circuit, "idle")
        await self._reset_circuit(circuit)

    @staticmethod
    async def _reset_circuit(circuit: _Circuit) -> None:
        # Both pumps then fail on their reads and the library's handler returns.
        await reset_stream(circuit.hop)
        await reset_stream(circuit.dst)

    async def _relay_data(
        self,
        src_stream: INetStream,
        dst_stream: INetStream,
        peer_id: ID,
        deadline: float | None = None,
        circuit_data_limit: list[int] | None = None,
    ) -> None:
        """Copy one direction of a circuit until EOF, the byte budget both directions share,
        or the circuit's deadline; touches only this circuit's two streams."""
        reset = True
        circuit = self._circuits.get(id(src_stream)) or self._circuits.get(id(dst_stream))
        if circuit is not None and circuit.dst is None:
            circuit.dst = dst_stream if circuit.hop is src_stream else src_stream
        # ``deadline`` is on time.monotonic()'s clock; trio's clock has an arbitrary offset.
        left = math.inf if deadline is None else deadline - time.monotonic()
        with trio.move_on_after(max(left, 0.0)):
            try:
                while True:
                    data = await src_stream.read(PUMP_CHUNK)
                    if not data:
                        reset = False  # a clean end: pass the half-close on
                        break
                    if circuit is not None:
                        circuit.last_active = trio.current_time()
                    if circuit_data_limit is not None:
                        if len(data) > circuit_data_limit[0]:
                            log.info("relayed circuit of %s reached its byte cap", peer_id)
                            break
                        circuit_data_limit[0] -= len(data)
                    with trio.fail_after(PUMP_WRITE_TIMEOUT):
                        await dst_stream.write(data)
            except Exception as e:
                log.debug("relayed circuit of %s ended: %s", peer_id, e)
        if reset:
            # Cap, deadline or error: end both directions now (the other pump sees a reset).
            await reset_stream(src_stream)
            await reset_stream(dst_stream)
        else:
            closed = False
            with trio.move_on_after(MESSAGE_TIMEOUT):
                try:
                    await dst_stream.close()
                    closed = True
                except Exception as e:
                    log.debug("passing on the end of a relayed circuit failed: %s", e)
            if not closed:
                await reset_stream(dst_stream)
        # The library files circuits under a peer id; forget the entry only if it is ours.
        entry = self._active_relays.get(peer_id)
        if entry is not None and src_stream in entry:
            del self._active_relays[peer_id]

    # ---- stop: a circuit for us --------------------------------------------------------------

    async def _handle_stop_stream(self, stream: INetStream) -> None:
        relay_id = stream.muxed_conn.peer_id
        try:
            with trio.fail_after(MESSAGE_TIMEOUT):
                msg = await read_delimited_msg(stream, StopMessage)
            if msg.type != StopMessage.CONNECT:
                await _send_status(stream, StatusCode.UNEXPECTED_MESSAGE, stop=True)
                await reset_stream(stream)
                return
            source_id = ID(msg.peer.id)
        except Exception as e:
            log.debug("bad circuit from relay %s: %s", relay_id, e)
            await reset_stream(stream)
            return
        source = source_id.to_base58()
        if not self.is_allowed(source):
            self.rejections.record(Rejection.relay_not_member, source, f"via {relay_id}")
            await _send_status(stream, StatusCode.PERMISSION_DENIED, stop=True)
            await reset_stream(stream)
            return
        await _send_status(stream, StatusCode.OK, stop=True)
        ma = _circuit_ma(relay_id, source_id)
        raw = RawConnection(
            stream=stream, initiator=False, connection_type=ConnectionType.RELAYED, addresses=[ma]
        )
        try:
            muxed = await self.host.upgrade_inbound_connection(raw, ma)
        except Exception as e:
            log.info("relayed connection from %s via %s failed: %s", source, relay_id, e)
            await reset_stream(stream)
            return
        if muxed.peer_id != source_id:
            # The relay named a member, Noise proved someone else: keep nothing of it.
            self.rejections.record(
                Rejection.relay_impersonation, muxed.peer_id.to_base58(), f"as {source}"
            )
            await muxed.close()
            return
        _tag_relayed(self.host, source_id, muxed, ma)
        self.relayed_in += 1
        log.info("relayed connection from %s via %s", source, relay_id)


# ---- client side ---------------------------------------------------------------------------


async def _hop_stream(host: IHost, relay: PeerInfo) -> INetStream:
    if not host.get_network().get_connections(relay.peer_id):
        await host.connect(relay)
    stream: INetStream = await host.new_stream(relay.peer_id, [HOP_PROTOCOL])
    return stream


async def _hop_status(stream: INetStream) -> HopMessage:
    with trio.fail_after(MESSAGE_TIMEOUT):
        resp = await read_delimited_msg(stream, HopMessage)
    if resp.type != HopMessage.STATUS or not resp.HasField("status"):
        raise RelayError("relay answered without a status")
    if resp.status != StatusCode.OK:
        raise RelayError(f"relay refused: {_status_name(resp.status)}")
    return resp


async def reserve_on(host: IHost, relay: PeerInfo) -> int:
    """Make (or renew) a reservation on ``relay``; returns its expiry (Unix seconds)."""
    stream = await _hop_stream(host, relay)
    try:
        # Spec: RESERVE carries no peer; the relay takes the connection's authenticated peer.
        await write_delimited_msg(stream, HopMessage(type=HopMessage.RESERVE))
        resp = await _hop_status(stream)
        if not resp.HasField("reservation") or resp.reservation.expire <= 0:
            raise RelayError("relay accepted without a reservation expiry")
        expire = int(resp.reservation.expire)
    except BaseException:
        await reset_stream(stream)
        raise
    try:
        await stream.close()
    except Exception as e:
        log.debug("closing a reservation stream failed: %s", e)
    return expire


async def dial_through(host: IHost, circuit: CircuitAddr, relay_addrs: list[Any]) -> INetConn:
    """Open a connection to ``circuit.dest`` through ``circuit.relay`` (circuit relay v2 CONNECT,
    then Noise and Yamux over the relayed stream, as on TCP)."""
    relay_id = ID.from_base58(circuit.relay)
    dest_id = ID.from_base58(circuit.dest)
    stream = await _hop_stream(host, PeerInfo(relay_id, relay_addrs))
    try:
        await write_delimited_msg(
            stream,
            HopMessage(type=HopMessage.CONNECT, peer=CircuitPeerId(id=dest_id.to_bytes())),
        )
        await _hop_status(stream)
        ma = _circuit_ma(relay_id, dest_id)
        raw = RawConnection(
            stream=stream, initiator=True, connection_type=ConnectionType.RELAYED, addresses=[ma]
        )
        conn = await host.upgrade_outbound_connection(raw, dest_id)
    except BaseException:
        await reset_stream(stream)
        raise
    _tag_relayed(host, dest_id, conn.muxed_conn, ma)
    return conn
