"""Wall time → slot, epoch and Clock sysvar, and the per-slot blockhashes.

One slot every 400 ms from the moment the chain started (``DEFAULT_MS_PER_SLOT``), so slot and
``unix_timestamp`` advance together the way they do on a validator whose clock is the wall clock.
There are no skipped slots here, so block height equals slot.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable

from solders.clock import DEFAULT_MS_PER_SLOT, MAX_RECENT_BLOCKHASHES
from solders.epoch_schedule import EpochSchedule
from solders.hash import Hash
from solders.litesvm import Clock

__all__ = ["BlockhashQueue", "SlotClock"]

SECONDS_PER_SLOT = DEFAULT_MS_PER_SLOT / 1000


class SlotClock:
    """Chain time = wall time (``now()``) plus an offset that tests may advance.

    Never runs backwards: a wall clock stepped back holds the slot and timestamp where they were,
    as a validator's clock would (its timestamps are bounded below by the previous slot's)."""

    def __init__(
        self, now: Callable[[], float] = time.time, schedule: EpochSchedule | None = None
    ) -> None:
        self._now = now
        self.genesis_time = now()
        self.schedule = schedule or EpochSchedule.without_warmup()
        self._offset = 0.0
        self._slot = 0
        self._unix = math.floor(self.genesis_time)

    def now(self) -> float:
        """Chain time in seconds since the epoch."""
        return self._now() + self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the chain clock only moves forward")
        self._offset += seconds

    def advance_slots(self, n: int) -> None:
        """``n`` slots ahead, exactly (``n · 0.4`` s as a float could round one slot short)."""
        if n < 0:
            raise ValueError("the chain clock only moves forward")
        self.read()
        self._offset += n * SECONDS_PER_SLOT
        self._slot += n

    def read(self) -> tuple[int, int]:
        """(slot, unix_timestamp) now."""
        t = self.now()
        slot = max(self._slot, math.floor((t - self.genesis_time) / SECONDS_PER_SLOT))
        unix = max(self._unix, math.floor(t))
        self._slot, self._unix = slot, unix
        return slot, unix

    def sysvar(self, slot: int, unix: int) -> Clock:
        epoch = self.schedule.get_epoch(slot)
        first = self.schedule.get_first_slot_in_epoch(epoch)
        epoch_start = math.floor(self.genesis_time + first * SECONDS_PER_SLOT)
        leader_epoch = self.schedule.get_leader_schedule_epoch(slot)
        return Clock(slot, epoch_start, epoch, leader_epoch, unix)


class BlockhashQueue:
    """One blockhash per slot, the newest ``MAX_RECENT_BLOCKHASHES`` + 1 of them kept (a bank's
    queue holds 300; transactions may use those of age ≤ 150, fee queries those of age ≤ 300).

    Hashes are derived from the genesis hash and the slot, so none has to be computed for slots
    that passed while nothing asked (a long pause costs nothing)."""

    def __init__(self, genesis: Hash, capacity: int = MAX_RECENT_BLOCKHASHES + 1) -> None:
        self.genesis = genesis
        self._capacity = capacity
        self._by_hash: OrderedDict[Hash, int] = OrderedDict()
        self.latest_slot = -1
        self.latest = genesis
        self.advance_to(0)

    def hash_of(self, slot: int) -> Hash:
        return Hash(hashlib.sha256(bytes(self.genesis) + slot.to_bytes(8, "little")).digest())

    def advance_to(self, slot: int) -> list[int]:
        """Register the blockhashes up to ``slot``; returns the slots that are new."""
        if slot <= self.latest_slot:
            return []
        new = list(range(self.latest_slot + 1, slot + 1))
        for s in new[-self._capacity :]:
            h = self.hash_of(s)
            self._by_hash[h] = s
        while len(self._by_hash) > self._capacity:
            self._by_hash.popitem(last=False)
        self.latest_slot, self.latest = slot, self.hash_of(slot)
        return new

    def age(self, blockhash: Hash) -> int | None:
        """Slots since ``blockhash`` was the latest; None if it is not in the queue."""
        slot = self._by_hash.get(blockhash)
        return None if slot is None else self.latest_slot - slot
