"""Announcements sent straight to named members, not through gossip (host process, trio).

Protocol ``/psyche/tell/1``, one message per stream::

    length (u16 big-endian, ≤ MAX_ANNOUNCEMENT) ‖ length bytes (a signed announcement)

Why: a trainer's resends go through gossip, and gossip can leave one host out for a whole round.
On loaded cores py-libp2p's meshes churn; at 32 real hosts on 2 cores a receiver heard none of
16–18 producers' results, nor any of their resends, in 2 of 5 runs (bench/README.md, "Scale").
A client that never hears a result the consensus holds drops out of the epoch. The trainer knows
exactly who has not heard its result — every fetch asks the announcer first, and its host
reports the askers — so its resends go to those members alone, over the connections it
already has (``psyche.daemon.resending``). The receiving host treats the bytes as gossip from the
stream's (Noise-authenticated) peer: members only, bounded size, handed to the parent as gossip
is (:meth:`.gossip.Gossip.deliver`), where the daemon opens it like any announcement (its
signature names the same key) and takes a repeat as a no-op.

A member could use the protocol to flood a host, so each peer gets a small budget
(:class:`TellBudget`: a burst of :data:`TELL_BURST`, refilled at :data:`TELL_REFILL_PER_S`); an
honest trainer sends a member at most two messages per result. Streams are typed by
:class:`~.blobs.ByteStream`, so this module is unit-tested without libp2p.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Set

import trio

from psyche.p2p.host.blobs import ByteStream, cleanup_scope, read_exactly
from psyche.p2p.host.peers import HostCounters
from psyche.p2p.messages import MAX_ANNOUNCEMENT
from psyche.p2p.rejections import Rejection, Rejections

__all__ = [
    "TELL_BURST",
    "TELL_PROTOCOL",
    "TELL_REFILL_PER_S",
    "DirectAnnouncements",
    "TellBudget",
    "encode_tell",
]

log = logging.getLogger("psyche.p2p.host")

TELL_PROTOCOL = "/psyche/tell/1"
TELL_BURST = 16
TELL_REFILL_PER_S = 1.0
SENDS_AT_ONCE = 8
"""Streams one host opens at once for direct announcements."""
SEND_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 5.0
_LEN = 2


def encode_tell(data: bytes) -> bytes:
    if not 0 < len(data) <= MAX_ANNOUNCEMENT:
        raise ValueError(f"a direct announcement is 1 to {MAX_ANNOUNCEMENT} bytes")
    return len(data).to_bytes(_LEN, "big") + bytes(data)


class TellBudget:
    """Per peer, a token bucket: :data:`TELL_BURST` messages, refilled at
    :data:`TELL_REFILL_PER_S`. Peers are the allow-list's members, so the map is bounded by it
    (:meth:`retain`)."""

    def __init__(self, burst: int = TELL_BURST, refill_per_s: float = TELL_REFILL_PER_S) -> None:
        self.burst = burst
        self.refill = refill_per_s
        self._tokens: dict[str, tuple[float, float]] = {}  # peer -> (tokens, at)

    def take(self, peer: str, now: float) -> bool:
        tokens, at = self._tokens.get(peer, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.refill)
        if tokens < 1.0:
            self._tokens[peer] = (tokens, now)
            return False
        self._tokens[peer] = (tokens - 1.0, now)
        return True

    def retain(self, peers: frozenset[str]) -> None:
        for peer in [p for p in self._tokens if p not in peers]:
            del self._tokens[peer]


class DirectAnnouncements:
    """Both ends of ``/psyche/tell/1``: :meth:`handle` for streams peers open, :meth:`send` to
    tell members."""

    def __init__(
        self,
        deliver: Callable[[str, bytes], None],
        open_stream: Callable[[str], Awaitable[ByteStream]],
        is_allowed: Callable[[str], bool],
        counters: HostCounters,
        rejections: Rejections,
        connected: Callable[[], Set[str]] | None = None,
    ) -> None:
        self.deliver = deliver
        self.open_stream = open_stream
        self.is_allowed = is_allowed
        self.connected = connected
        self.counters = counters
        self.rejections = rejections
        self.budget = TellBudget()
        self._sending = trio.Semaphore(SENDS_AT_ONCE)

    async def handle(self, stream: ByteStream, peer: str) -> None:
        try:
            if not self.is_allowed(peer):
                self.counters.dropped_not_allowed += 1
                self.rejections.record(Rejection.non_member_gossip, peer, "sent directly")
                return
            if not self.budget.take(peer, trio.current_time()):
                self.rejections.record(Rejection.tell_over_limit, peer)
                return
            with trio.fail_after(READ_TIMEOUT_S):
                length = int.from_bytes(await read_exactly(stream, _LEN), "big")
                if not 0 < length <= MAX_ANNOUNCEMENT:
                    self.counters.dropped_oversize += 1
                    self.rejections.record(
                        Rejection.oversized_gossip, peer, f"{length} bytes, sent directly"
                    )
                    return
                data = await read_exactly(stream, length)
            self.counters.told_received += 1
            self.deliver(peer, data)
        except Exception as e:
            log.debug("direct announcement from %s failed: %s", peer, e)
        finally:
            with cleanup_scope(), contextlib.suppress(Exception):
                await stream.close()

    async def send(self, peers: Iterable[str], data: bytes) -> None:
        """Tell each of ``peers`` (members only) ``data``, a few streams at a time, over the
        connections this host holds: a member it is not connected to (gone, or being redialled
        by :mod:`.dialing`) is not dialled here, where a dead peer would hold a send slot for
        the whole deadline. A member not connected or not reached in :data:`SEND_TIMEOUT_S` is
        counted (``told_failed``) and skipped: the sender's next resend may still reach it."""
        frame = encode_tell(data)
        connected = None if self.connected is None else self.connected()
        async with trio.open_nursery() as nursery:
            for peer in peers:
                if not self.is_allowed(peer):
                    continue
                if connected is not None and peer not in connected:
                    self.counters.told_failed += 1
                    continue
                nursery.start_soon(self._send_one, peer, frame)

    async def _send_one(self, peer: str, frame: bytes) -> None:
        async with self._sending:
            stream: ByteStream | None = None
            try:
                with trio.fail_after(SEND_TIMEOUT_S):
                    stream = await self.open_stream(peer)
                    await stream.write(frame)
                    await stream.close()
                self.counters.told += 1
            except Exception as e:
                self.counters.told_failed += 1
                log.debug("could not tell %s directly: %s", peer, e)
                if stream is not None:
                    with cleanup_scope(), contextlib.suppress(Exception):
                        await stream.reset()
