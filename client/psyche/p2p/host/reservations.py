"""Our reservations on the relays the parent names (trio, docs/p2p-nat.md).

A NAT'd host holds a reservation on each relay the parent picked, so members can reach it at
``<relay addr>/p2p-circuit/p2p/<me>``. Each is renewed at half its life and remade as soon as the
relay is reachable again after its connection dropped (the relay voids it then); a relay that
refused or could not be reached is tried again after :data:`RESERVE_RETRY`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import multiaddr
import trio
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr

from psyche.p2p.control import Reserve, Reserved
from psyche.p2p.host.channel import ControlChannel
from psyche.p2p.host.dialing import REDIAL_INTERVAL
from psyche.p2p.host.relay import reserve_on
from psyche.p2p.nat import circuit_addr, relay_of

__all__ = ["RelayState", "Reservations"]

log = logging.getLogger("psyche.p2p.host")

RESERVE_TIMEOUT = 10.0
RESERVE_RETRY = 10.0
"""Pause before trying again a relay that refused or could not be reached."""


@dataclass(slots=True)
class RelayState:
    """One relay the parent asked us to hold a reservation on."""

    addrs: list[str]
    """Its direct addresses as given (``…/p2p/<relay id>``); our circuit addresses extend them."""
    expires: float = 0.0
    """Unix time the reservation lapses; 0 while we hold none."""
    next_try: float = 0.0
    """Monotonic time of the next renewal (half the reservation's life) or retry."""
    error: str | None = None
    attempt: trio.Event | None = None
    """Set when the reservation attempt in flight ends (None: none in flight)."""


class Reservations:
    """The relays we hold (or try to hold) reservations on; ``connected`` names the peers we
    have a connection to."""

    def __init__(
        self, control: ControlChannel, host: Any, me: str, connected: Callable[[], set[str]]
    ) -> None:
        self.control = control
        self.host = host
        self.me = me
        self.connected = connected
        self.relays: dict[str, RelayState] = {}

    async def reserve(self, req: Reserve) -> None:
        """Make ``req.relay_addrs`` the relays we hold reservations on; reply with our circuit
        addresses through those that accepted."""
        errors: list[str] = []
        wanted: dict[str, list[str]] = {}
        for text in req.relay_addrs:
            try:
                _, relay = relay_of(text)
                ID.from_base58(relay)
                multiaddr.Multiaddr(text)
                circuit_addr(text, self.me)
            except Exception as e:
                errors.append(f"{text!r}: {e}")
                continue
            addrs = wanted.setdefault(relay, [])
            if text not in addrs:
                addrs.append(text)
        previous = self.relays
        self.relays = {}
        for relay, addrs in wanted.items():
            state = previous.get(relay) or RelayState(addrs)
            state.addrs = addrs
            self.relays[relay] = state
        async with trio.open_nursery() as nursery:
            for relay in self.relays:
                nursery.start_soon(self.reserve_one, relay, True)
        errors.extend(f"relay {r}: {s.error}" for r, s in self.relays.items() if s.error)
        await self.control.send(
            Reserved(req.req_id, self.circuit_addrs()[:64], [e[:4000] for e in errors[:64]])
        )

    async def reserve_one(self, relay: str, now: bool = False) -> None:
        """Reserve (or renew) on ``relay``; ``now`` overrides a pending retry pause. One attempt
        per relay at a time: with ``now``, an attempt already in flight is waited for instead."""
        state = self.relays.get(relay)
        if state is None:
            return
        if state.attempt is not None:
            if now:
                await state.attempt.wait()
            return
        if not now and time.monotonic() < state.next_try:
            return
        state.attempt = trio.Event()
        try:
            pid = ID.from_base58(relay)
            infos = [info_from_p2p_addr(multiaddr.Multiaddr(a)) for a in state.addrs]
            addrs = list(dict.fromkeys(a for info in infos for a in info.addrs))
            with contextlib.suppress(Exception):
                self.host.get_network().unblock_peer(pid)
            error: str | None = f"no reservation within {RESERVE_TIMEOUT:g} s"
            with trio.move_on_after(RESERVE_TIMEOUT):
                try:
                    expires = await reserve_on(self.host, PeerInfo(pid, addrs))
                    error = None
                except Exception as e:
                    error = f"{type(e).__name__}: {e}"
            if error is None:
                life = max(expires - time.time(), 0.0)
                if not state.expires:
                    log.info("reserved on relay %s for %.0f s", relay, life)
                state.expires, state.error = float(expires), None
                state.next_try = time.monotonic() + max(life / 2, REDIAL_INTERVAL)
            else:
                if state.error != error:
                    log.warning("reservation on relay %s failed: %s", relay, error)
                state.expires, state.error = 0.0, error
                state.next_try = time.monotonic() + RESERVE_RETRY
        finally:
            state.attempt.set()
            state.attempt = None

    async def relay_loop(self) -> None:
        while True:
            await trio.sleep(REDIAL_INTERVAL)
            await self.relay_tick()

    async def relay_tick(self) -> None:
        """Renew reservations at half their life, and remake one as soon as the relay is
        reachable again after its connection dropped (the relay voids it then)."""
        connected = self.connected()
        for relay, state in self.relays.items():
            if state.expires and (relay not in connected or state.expires <= time.time()):
                log.info("reservation on relay %s lost; reserving again", relay)
                state.expires = 0.0
                state.next_try = 0.0
        async with trio.open_nursery() as nursery:
            for relay in list(self.relays):
                nursery.start_soon(self.reserve_one, relay)

    def circuit_addrs(self) -> list[str]:
        """Our addresses through every relay we hold a live reservation on."""
        now = time.time()
        return [
            circuit_addr(addr, self.me)
            for state in self.relays.values()
            if state.expires > now
            for addr in state.addrs
        ]
