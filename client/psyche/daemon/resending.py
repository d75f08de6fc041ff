"""This client's round announcements, sent again a few times while a peer may still need them.

Gossip gives no delivery guarantee a round can rely on. A peer that was not connected when a
message went out (a dial that took seconds, a relay circuit still being set up, a connection
dropped and redialled mid-epoch), or whose pubsub stream was not open yet and whose pending queue
overflowed (seen at 64 hosts: bench/README.md, "Scale"), gets it only through gossipsub's
IHAVE/IWANT gossip, which advertises the last 3 heartbeats (3 s) and nothing older. Measured
between real hosts (``tests/integration/p2p/test_resending.py``): a peer connected 2 s after an
announcement received it, one connected 6 s after never did. What that costs the round:

* a ``TrainingResult`` a witness never saw leaves its trainer out of that witness's bloom (an
  honest trainer unpaid, or ejected if it happens to a quorum), and one that a client never saw
  while the witnesses' consensus holds it makes that client **drop out of the epoch**, since it
  cannot apply what it cannot fetch (docs/protocol.md, "Applying results");
* a ``Finished`` a witness never saw holds the round until its train timeout and marks the
  sender a straggler.

So the same signed bytes go out again :data:`RESEND_AFTER_S` after the first send, while they
can still matter: a result until the round that witnesses it (its round and the next; it is
applied at the start of the one after), a ``Finished`` while its round trains. Receivers lose
nothing and verify nothing twice: ``GossipRouter`` opens each distinct message once, and a
result or ``Finished`` already taken is a no-op. The cost is up to three more small messages
per announcement, in rounds long enough for them (bench/README.md, "Resending").

A result stops going out again once every other member has asked this client for its payload
(:meth:`Transport.askers`, reported by the P2P host): its blob is named only in the announcement,
so each asker has heard it, and every fetch asks the announcer first. Each resend is a new
gossip message that every host receives from several mesh peers and forwards; at 24 real hosts
on 2 cores resending them all cost a host about 0.4 CPU s per round (bench/README.md,
"Resends stop once every member asked").

So a result's resends go **straight to the members that have not asked** (:meth:`Transport.tell`),
not through gossip. Gossip can leave one host out of every mesh for a whole round: at 32 real
hosts on 2 cores a receiver heard none of 16–18 producers' results nor their gossiped resends in
2 of 5 runs (bench/README.md, "Scale"), and such a client drops out of the epoch. A direct
message does not depend on the mesh, and it costs one small stream per member still missing
instead of a message every host receives from several mesh peers and forwards. It goes out at
the first resend already: rounds can be shorter than the second (12 s), and a result missed past
its witness round is missed for good. A ``Finished``, which names no payload, and a result for
which the caller cannot say who asked, still go through gossip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DIRECT_FROM", "RESEND_AFTER_S", "Outbox", "Resend"]

RESEND_AFTER_S: tuple[float, ...] = (4.0, 12.0, 28.0)
"""Seconds after the first send at which the same message goes out again: the first just past
gossipsub's IHAVE window (3 heartbeats of 1 s), then doubling gaps, three resends in all, so a
round costs at most four copies of each of a client's announcements."""

DIRECT_FROM = 0
"""A result's resends from this one on (0-based) go straight to the members that have not asked
for its payload; earlier ones through gossip (tests set it past the last to compare)."""


@dataclass(frozen=True, slots=True)
class Resend:
    """One announcement to send again: through gossip (``to`` is ``None``), or straight to the
    members in ``to``."""

    data: bytes
    to: frozenset[str] | None = None


@dataclass(slots=True)
class _Entry:
    data: bytes
    last_height: int
    """The last round height (the coordinator's) at which it is still sent again."""
    while_training: bool
    """Sent again only while its round is in RoundTrain (a ``Finished``)."""
    first_sent: float
    resends: int = 0
    blob_hash: bytes | None = None
    """A result's payload: once every member asked for it, the result is not sent again."""


class Outbox:
    """The signed announcements of this client's current epoch that may go out again."""

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self.resent = 0
        """Messages sent again so far (for tests and the bench)."""
        self.settled = 0
        """Results dropped before a due resend because every member had asked for them."""
        self.told = 0
        """Direct messages the resends asked for (one per member not yet asked)."""

    def sent_result(
        self, data: bytes, *, height: int, now: float, blob_hash: bytes | None = None
    ) -> None:
        """``data``, a ``TrainingResult`` of round ``height`` naming the payload ``blob_hash``,
        went out at ``now``: witnessed in the next round, so sent again through it."""
        self._entries.append(_Entry(bytes(data), height + 1, False, now, blob_hash=blob_hash))

    def sent_finished(self, data: bytes, *, height: int, now: float) -> None:
        """``data``, a ``Finished`` of round ``height``, went out at ``now``: it matters only
        while that round trains."""
        self._entries.append(_Entry(bytes(data), height, True, now))

    def due(
        self,
        *,
        now: float,
        height: int,
        training: bool,
        not_asked: Callable[[bytes], frozenset[str]] | None = None,
    ) -> list[Resend]:
        """What to send again now that the coordinator is at round ``height`` (in RoundTrain
        when ``training``); entries past their use are forgotten. ``not_asked`` names the other
        members that have not asked for a payload yet (asked only when a resend is due): a
        result they all asked for is dropped, and from resend :data:`DIRECT_FROM` on a result
        goes to them alone. Without it every resend goes through gossip."""
        out: list[Resend] = []
        keep: list[_Entry] = []
        for e in self._entries:
            if height > e.last_height or (e.while_training and not training):
                continue
            if e.resends < len(RESEND_AFTER_S) and now - e.first_sent >= RESEND_AFTER_S[e.resends]:
                missing = None
                if e.blob_hash is not None and not_asked is not None:
                    missing = not_asked(e.blob_hash)
                    if not missing:
                        self.settled += 1
                        continue
                to = missing if e.resends >= DIRECT_FROM else None
                # One resend per call, even after a long pause: the message is what matters,
                # not the count.
                e.resends = next(
                    (i for i, t in enumerate(RESEND_AFTER_S) if now - e.first_sent < t),
                    len(RESEND_AFTER_S),
                )
                out.append(Resend(e.data, to))
                self.told += len(to or ())
            if e.resends < len(RESEND_AFTER_S):
                keep.append(e)
        self._entries = keep
        self.resent += len(out)
        return out

    def __len__(self) -> int:
        return len(self._entries)
