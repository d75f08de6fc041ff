"""What one client holds for the current epoch; dropped at the epoch's end."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from psyche.daemon.resending import Outbox
from psyche.daemon.rounds import RoundState
from psyche.p2p.messages import Finished, TrainingResult
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity

__all__ = [
    "EARLY_PER_SENDER",
    "EARLY_STEPS_AHEAD",
    "EARLY_TOTAL",
    "EarlyAnnouncements",
    "EpochView",
]

EARLY_STEPS_AHEAD = 2
"""How far past the newer of this client's newest round and its newest coordinator state a
peer's ``TrainingResult`` or ``Finished`` may be and still be held for its round: a client whose
state arrives late (RPC latency, a coalesced notification) or whose state loop is still busy
with the previous state is at most a round or two behind its peers. Anything further ahead is
refused (``future_result``)."""
EARLY_PER_SENDER = 2 * (EARLY_STEPS_AHEAD + 1) + 2
"""Early announcements held per sender: an honest client sends one result and one Finished per
round, so this holds every honest one in the window with room to spare, and bounds what one
(signed, epoch-member) flooder can make this client keep."""
EARLY_TOTAL = 2048
"""Early announcements held in all (at most 4 KiB each), whatever the number of senders."""


@dataclass(frozen=True, slots=True)
class Early:
    """An announcement for a round this client has not started yet (already opened: signed by
    ``sender``, published by ``peer``)."""

    sender: bytes
    payload: TrainingResult | Finished
    peer: str

    @property
    def step(self) -> int:
        return self.payload.step


@dataclass
class EarlyAnnouncements:
    """Peers' results and Finished for rounds this client has not started, held (bounded per
    sender and in total) until the round starts here, when they are taken as if just arrived.

    Without this a peer that started a round before this client (this client's state came late,
    or its state loop was still applying) had its result dropped here, and this client then
    applied fewer results than the witnesses' consensus named: its weights diverged for good.
    """

    by_sender: dict[bytes, list[Early]] = field(default_factory=dict)
    total: int = 0

    def hold(self, item: Early) -> bool:
        """Keep ``item``; False if a bound is reached (the caller refuses it). A repeat of an
        announcement already held is not kept twice, and is not refused."""
        held = self.by_sender.setdefault(item.sender, [])
        if any(e.payload == item.payload for e in held):
            return True
        if len(held) >= EARLY_PER_SENDER or self.total >= EARLY_TOTAL:
            return False
        held.append(item)
        self.total += 1
        return True

    def take(self, step: int) -> tuple[list[Early], list[Early]]:
        """The announcements for ``step`` (its round just started here), and those for earlier
        steps (rounds this client never started: they are dropped). Later ones stay held."""
        ready: list[Early] = []
        dropped: list[Early] = []
        for sender in list(self.by_sender):
            keep: list[Early] = []
            for e in self.by_sender[sender]:
                (ready if e.step == step else dropped if e.step < step else keep).append(e)
            if keep:
                self.by_sender[sender] = keep
            else:
                del self.by_sender[sender]
        self.total -= len(ready) + len(dropped)
        return ready, dropped

    def clear(self) -> list[Early]:
        """Everything held (the epoch ended)."""
        out = [e for held in self.by_sender.values() for e in held]
        self.by_sender.clear()
        self.total = 0
        return out


@dataclass
class EpochView:
    epoch: int
    rounds: dict[int, RoundState] = field(default_factory=dict)
    """The last three rounds by height: h−2 is applied at the start of h, h−1 is witnessed in
    h, h is trained in h."""
    early: EarlyAnnouncements = field(default_factory=EarlyAnnouncements)
    """Peers' results and Finished for rounds not started here yet (``GossipRouter``)."""
    downloads: dict[tuple[int, BatchId], asyncio.Task[None]] = field(default_factory=dict)
    """Peers' results still downloading, by (height, batch): the apply awaits these."""
    ready: set[bytes] = field(default_factory=set)
    """P2P keys of the members that announced their model loaded (warmup)."""
    dropped: bool = False
    """This client sits the rest of the epoch out (it neither trains nor witnesses)."""
    cooldown_done: bool = False
    outbox: Outbox = field(default_factory=Outbox)
    """This client's round announcements of the epoch that go out again (``resending``)."""
    stragglers: set[NodeIdentity] = field(default_factory=set)
    """Members that had not announced Finished when a round of this epoch hit its train timeout.
    Rounds are not held open for them (nor for their results) until they announce Finished
    again, so a member that went silent costs one timed-out round, not one per round until a
    health check removes it. The protocol's own limit (``max_round_train_time``) already cut
    them off once, so an alive but slow member loses nothing the timeout had not taken."""

    def keep_rounds_from(self, height: int) -> None:
        for h in [h for h in self.rounds if h < height]:
            del self.rounds[h]
        for k in [k for k in self.downloads if k[0] < height]:
            self.downloads.pop(k).cancel()

    def cancel_downloads(self) -> None:
        for task in self.downloads.values():
            task.cancel()
        self.downloads.clear()
