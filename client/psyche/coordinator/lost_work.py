"""No lost work: re-assigning intervals whose results did not reach consensus (docs/protocol.md).

Before this, a trainer that died mid-epoch simply left a hole in the data: its intervals of the
last rounds were never applied and never trained again. Now such intervals wait in
``EpochState.lost`` (FIFO, at most ``MAX_LOST_BATCHES``; an interval lost while it is full is
dropped) and later training rounds hand them out again as ``Round.retries``.

Only clients already known to be failing are examined, never every client's bloom entry: on
Solana a scan over all clients would blow the compute budget. Two events queue work:

* a health check that ejects a client queues its interval of the round the check is about
  (``previous_previous_round``), the one its missing result came from;
* at the witness timeout that ends round ``h``, every client that is about to leave (not
  Healthy) queues its interval of round ``h−1`` unless round ``h``'s witnesses attested it, and
  its interval of round ``h`` unconditionally (it would be attested only after it left). A
  leaving client that did deliver round ``h`` may thus get that interval trained twice; never
  zero times.

A round's interval of a client is recomputed from the round's stored data (client list rebuilt
from ``exited_clients``, seed, data index, batch size, retries); a round "trained" unless it
started after ``last_step`` was set (the drain rounds). The round at height ``r`` has step
``start_step + r``.
"""

from __future__ import annotations

from psyche.coordinator import consensus
from psyche.coordinator.queries import CoordinatorState
from psyche.coordinator.types import (
    MAX_LOST_BATCHES,
    MAX_ROUND_RETRIES,
    ClientState,
    EpochState,
    Round,
)
from psyche.protocol.data_selection import BatchId, slot_intervals, trainer_order
from psyche.protocol.identity import NodeIdentity


def round_trained(c: CoordinatorState, rnd: Round) -> bool:
    """Whether ``rnd`` (a stored round of this epoch) was a training round, not a drain round."""
    return c.round_trained(rnd)


def fresh_size(c: CoordinatorState, rnd: Round) -> int:
    """New samples of ``rnd``: its batch size minus its retried samples (the data index of the
    next round is ``rnd.data_index`` plus this)."""
    return max(0, c.batch_size_for_round(rnd) - sum(b.size for b in rnd.retries))


def intervals_of(c: CoordinatorState, rnd: Round) -> dict[NodeIdentity, BatchId]:
    """Each client's interval in ``rnd`` (a stored round of this epoch), computed once for the
    round; empty when the round did not train (or the stored round is inconsistent)."""
    if not round_trained(c, rnd):
        return {}
    ids = c.round_clients(rnd)
    try:
        slots = slot_intervals(len(ids), rnd.data_index, c.batch_size_for_round(rnd), rnd.retries)
    except ValueError:
        return {}
    order = trainer_order(len(ids), rnd.random_seed)
    return {ids[i]: b for i, b in zip(order, slots, strict=True) if b is not None}


def push_lost(es: EpochState, batch: BatchId | None) -> None:
    """Queue ``batch`` for re-assignment; dropped when the queue is full."""
    if batch is not None and len(es.lost) < MAX_LOST_BATCHES:
        es.lost.append(batch)


def take_retries(es: EpochState, n_clients: int, batch_size: int) -> list[BatchId]:
    """Pop the head of the queue while the round has fewer than ``min(MAX_ROUND_RETRIES,
    n − 1)`` retries and their total stays within ``batch_size`` (at least one trainer is always
    left for fresh samples; a lone trainer takes none)."""
    limit = min(MAX_ROUND_RETRIES, n_clients - 1)
    taken: list[BatchId] = []
    total = 0
    while es.lost and len(taken) < limit and total + es.lost[0].size <= batch_size:
        batch = es.lost.pop(0)
        taken.append(batch)
        total += batch.size
    return taken


def queue_leaving_work(c: CoordinatorState) -> None:
    """At the witness timeout ending the current round ``h``, before clients leave: queue the
    work of every client that is not Healthy (in index order), as the module docstring says."""
    leaving = [cl.id for cl in c.epoch_state.clients if cl.state is not ClientState.Healthy]
    if not leaving:
        return
    rnd = c.current_round()
    prev = c.previous_round() if rnd.height >= 1 else None
    prev_intervals = intervals_of(c, prev) if prev is not None else {}
    intervals = intervals_of(c, rnd)
    for who in leaving:
        if who in prev_intervals and not consensus.trainer_healthy(who, rnd.witnesses, c.config):
            push_lost(c.epoch_state, prev_intervals[who])
        push_lost(c.epoch_state, intervals.get(who))
