"""No member can take a relay's circuits from the others (issue 26, finding 3), over real libp2p
hosts on loopback in one trio run: a relay (:class:`MemberRelay`), NAT'd members holding
reservations on it, abusers that open circuits with bare HOP CONNECTs and then send nothing
(the cheapest way to hold a circuit), and an honest member dialling through the relay with the
product's :func:`dial_through`.

Before the fix the relay capped the circuits a peer was an *end* of: one abuser holding 8 idle
circuits to a NAT'd member made every other member's circuit to it RESOURCE_LIMIT_EXCEEDED,
and four abusers held all 32 circuits of the relay, for up to the 30 min circuit duration.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import multiaddr
import pytest
import trio
from libp2p import new_host
from libp2p.abc import IHost, INetStream
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.tools.anyio_service import background_trio_service

from psyche.p2p.host.blobs import PING_PROTOCOL, ping, serve_ping
from psyche.p2p.host.main import libp2p_key_pair
from psyche.p2p.host.relay import MemberRelay, dial_through, reserve_on
from psyche.p2p.nat import DEFAULT_RELAY_LIMITS, CircuitAddr, RelayLimits
from psyche.p2p.rejections import Rejections
from psyche.protocol.identity import SecretKey

log = logging.getLogger("test.relay_shares")


@dataclass
class Node:
    host: IHost
    relay: MemberRelay

    @property
    def id(self) -> ID:
        return self.host.get_id()

    @property
    def info(self) -> PeerInfo:
        return PeerInfo(self.id, self.host.get_transport_addrs())


def _host() -> IHost:
    # The product's settings (psyche.p2p.host.main._build) without pubsub, which these hosts do not
    # run (its connection notifee would block every connection).
    key_pair = libp2p_key_pair(SecretKey.generate())
    noise = NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)
    return new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: noise},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
    )


@asynccontextmanager
async def _world(n: int, limits: RelayLimits = DEFAULT_RELAY_LIMITS) -> AsyncIterator[list[Node]]:
    """``n`` hosts, every one a member of every other's run and running the relay."""
    async with AsyncExitStack() as stack:
        nodes = []
        for _ in range(n):
            host = _host()
            listen = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
            await stack.enter_async_context(host.run(listen_addrs=[listen]))
            relay = MemberRelay(host, limits, lambda peer: True, Rejections(log))
            await stack.enter_async_context(background_trio_service(relay))
            host.set_stream_handler(TProtocol(PING_PROTOCOL), serve_ping)
            nodes.append(Node(host, relay))
        yield nodes


async def _hold(abuser: Node, relay: Node, dest: Node) -> INetStream | None:
    """A bare HOP CONNECT to ``dest``; the stream if the relay opened the circuit."""
    if not abuser.host.get_network().get_connections(relay.id):
        await abuser.host.connect(relay.info)
    stream = await abuser.host.new_stream(relay.id, [HOP_PROTOCOL])
    connect = HopMessage(type=HopMessage.CONNECT, peer=CircuitPeerId(id=dest.id.to_bytes()))
    await write_delimited_msg(stream, connect)
    try:
        with trio.fail_after(10):
            reply = await read_delimited_msg(stream, HopMessage)
    except Exception:
        reply = None
    if reply is not None and reply.status == StatusCode.OK:
        return stream
    await stream.reset()
    return None


async def _dial(member: Node, relay: Node, dest: Node) -> str | None:
    """The product's dial through ``relay``; None when connected, else the error."""
    relay_addr = f"{relay.host.get_transport_addrs()[0]}/p2p/{relay.id}"
    circuit = CircuitAddr(relay_addr, relay.id.to_base58(), dest.id.to_base58())
    try:
        with trio.fail_after(20):
            await dial_through(member.host, circuit, list(relay.info.addrs))
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


async def _ping(member: Node, dest: Node) -> float:
    with trio.fail_after(5):
        stream = await member.host.new_stream(dest.id, [TProtocol(PING_PROTOCOL)])
        return await ping(stream)


async def _ended(stream: INetStream, within: float) -> bool:
    """Whether the circuit behind ``stream`` ends (EOF or reset) within ``within`` s."""
    with trio.move_on_after(within):
        try:
            while await stream.read(1 << 16):
                pass
        except Exception:
            pass
        return True
    return False


@pytest.mark.timeout(120)
def test_a_member_holding_circuits_to_a_nat_member_cuts_nobody_off() -> None:
    limits = DEFAULT_RELAY_LIMITS

    async def scenario() -> None:
        async with _world(4) as (relay, victim, abuser, honest):
            await reserve_on(victim.host, relay.info)
            held = [await _hold(abuser, relay, victim) for _ in range(8)]
            got = sum(s is not None for s in held)
            error = await _dial(honest, relay, victim)
            print(f"\nabuser held {got} of 8 circuits to the NAT'd member; honest dial: {error}")
            assert error is None, f"an honest member was cut off: {error}"
            assert got == limits.max_circuits_per_pair
            assert await _ping(honest, victim) >= 0  # the relayed connection carries traffic
            assert (
                relay.relay.admission.circuits_between(abuser.id.to_base58(), victim.id.to_base58())
                == got
            )

    trio.run(scenario)


@pytest.mark.timeout(120)
def test_members_filling_the_relay_give_way_to_one_holding_none() -> None:
    limits = DEFAULT_RELAY_LIMITS
    per_dest = limits.max_circuits_per_pair
    n_dests = limits.max_circuits_per_source // per_dest
    n_abusers = limits.max_circuits // limits.max_circuits_per_source

    async def scenario() -> None:
        async with _world(2 + n_dests + n_abusers) as nodes:
            relay, honest = nodes[0], nodes[1]
            dests, abusers = nodes[2 : 2 + n_dests], nodes[2 + n_dests :]
            for dest in dests:
                await reserve_on(dest.host, relay.info)
            held: list[INetStream] = []
            for abuser in abusers:
                for dest in dests:
                    for _ in range(per_dest):
                        stream = await _hold(abuser, relay, dest)
                        if stream is not None:
                            held.append(stream)
            admission = relay.relay.admission
            assert len(held) == admission.open_circuits == limits.max_circuits
            error = await _dial(honest, relay, dests[0])
            print(f"\n{n_abusers} members hold all {len(held)} circuits; honest dial: {error}")
            assert error is None, f"an honest member was refused by a full relay: {error}"
            assert await _ping(honest, dests[0]) >= 0
            # One abuser's circuit gave way; the relay stays within its bound.
            assert relay.relay.reclaimed["fair_share"] == 1
            assert admission.open_circuits == limits.max_circuits
            assert sum(admission.circuits_from(a.id.to_base58()) for a in abusers) == len(held) - 1
            assert admission.circuits_from(honest.id.to_base58()) == 1

    trio.run(scenario)


@pytest.mark.timeout(120)
def test_an_idle_circuit_is_reclaimed_and_a_busy_one_kept() -> None:
    # Long enough that a loaded machine never stalls the pings that long, short for a test.
    limits = RelayLimits(circuit_idle_seconds=3)

    async def scenario() -> None:
        async with _world(4, limits) as (relay, victim, abuser, honest):
            await reserve_on(victim.host, relay.info)
            idle = await _hold(abuser, relay, victim)
            assert idle is not None
            assert await _dial(honest, relay, victim) is None
            busy = trio.Event()

            async def keep_busy() -> None:
                while not busy.is_set():
                    await _ping(honest, victim)
                    await trio.sleep(0.2)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(keep_busy)
                within = limits.circuit_idle_seconds + 5
                assert await _ended(idle, within), "an idle circuit outlived the idle limit"
                await trio.sleep(limits.circuit_idle_seconds + 0.5)
                busy.set()
            assert relay.relay.reclaimed["idle"] == 1
            assert relay.relay.admission.circuits_from(abuser.id.to_base58()) == 0
            assert relay.relay.admission.circuits_from(honest.id.to_base58()) == 1
            assert await _ping(honest, victim) >= 0

    trio.run(scenario)
