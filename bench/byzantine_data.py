"""Who trains which samples in the attack benches: the protocol's data assignment after ejections.

A step's global batch is cut among the clients still in the run (`slot_intervals`, in client
order), so once an attacker is ejected the others train its share: a run keeps the all-honest
run's tokens per step, as the coordinator does (its `batch_size_for_round` is the run's, whatever
the client count). With `retries`, the samples of a rejected result wait in the coordinator's own
lost-work queue (`psyche.coordinator.lost_work`: `push_lost`, `take_retries`) and a later step
trains them again before fresh ones. With nobody ejected the slices are exactly the fixed ones
earlier versions of the benches used (`distro_vs_adamw.step_slices`), so all-honest runs are
unchanged.

What is simplified: slots go to clients in index order, not by the round seed's shuffle (which
only rotates who gets the intervals one sample larger).
"""

from __future__ import annotations

from psyche.coordinator.lost_work import push_lost, take_retries
from psyche.coordinator.types import EpochState
from psyche.protocol.data_selection import BatchId, fresh_size, slot_intervals

__all__ = ["Assignment"]


class Assignment:
    """The slices of every step of one run, fixed when a step first asks for them."""

    def __init__(self, clients: int, batch: int, ejected: set[int], retries: bool = True) -> None:
        self.clients, self.batch, self.ejected, self.retries = clients, batch, ejected, retries
        self._epoch = EpochState()
        self._data_index = 0
        self._steps: dict[int, dict[int, BatchId]] = {}
        self._lost: set[tuple[int, int]] = set()
        self.retried = 0
        """Samples trained again (from the lost-work queue)."""

    def of_step(self, step: int) -> dict[int, BatchId]:
        """Client → its interval of `step` (clients without one absent). Steps are asked for in
        order; a step's slices are fixed by the clients not ejected when it is first asked for."""
        if step not in self._steps:
            if self._steps and step != max(self._steps) + 1:
                raise ValueError(f"step {step} asked for out of order")
            active = [i for i in range(self.clients) if i not in self.ejected]
            retry = take_retries(self._epoch, len(active), self.batch) if self.retries else []
            slots = slot_intervals(len(active), self._data_index, self.batch, retry)
            self._data_index += fresh_size(self.batch, len(active), retry)
            self.retried += sum(b.size for b in retry)
            self._steps[step] = {i: b for i, b in zip(active, slots, strict=True) if b is not None}
        return self._steps[step]

    def lose(self, step: int, client: int) -> None:
        """`client`'s result of `step` is rejected: its samples wait for a retry (once)."""
        batch = self._steps.get(step, {}).get(client)
        if self.retries and batch is not None and (step, client) not in self._lost:
            self._lost.add((step, client))
            push_lost(self._epoch, batch)
