"""What one client holds for the current epoch; dropped at the epoch's end."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from psyche.daemon.rounds import RoundState
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity

__all__ = ["EpochView"]


@dataclass
class EpochView:
    epoch: int
    rounds: dict[int, RoundState] = field(default_factory=dict)
    """The last three rounds by height: h−2 is applied at the start of h, h−1 is witnessed in
    h, h is trained in h."""
    downloads: dict[tuple[int, BatchId], asyncio.Task[None]] = field(default_factory=dict)
    """Peers' results still downloading, by (height, batch): the apply awaits these."""
    ready: set[bytes] = field(default_factory=set)
    """P2P keys of the members that announced their model loaded (warmup)."""
    dropped: bool = False
    """This client sits the rest of the epoch out (it neither trains nor witnesses)."""
    cooldown_done: bool = False
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
