"""Points per epoch (docs/protocol.md, "Rewards"), fixed: credited only when an epoch ends
successfully.

The Solana program keeps the ledger; this pure function says what one epoch end is worth, so the
Python and Rust sides agree. The reference paid Healthy clients on every epoch end, including a
failed warmup, and its slashing path was dead because ``Ejected`` was never set. Here:

* ``EpochEnd(true)``: the clients still in ``epoch_state.clients`` (Cooldown has already moved every
  non-Healthy client out) share ``earning_rate_total_shared`` equally (integer division; the
  remainder is not paid, as on chain);
* every ``Ejected`` client in ``exited_clients`` is slashed ``slashing_rate_per_client``;
* ``EpochEnd(false)`` or a plain tick: nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import ClientState, TickResult
from psyche.protocol.identity import NodeIdentity


@dataclass(frozen=True, slots=True)
class EpochPoints:
    earned: dict[NodeIdentity, int] = field(default_factory=dict)
    slashed: dict[NodeIdentity, int] = field(default_factory=dict)


def epoch_points(
    coord: Coordinator, result: TickResult, earning_rate_total_shared: int, slashing_rate: int
) -> EpochPoints:
    """Points earned and slashed by the epoch end ``result`` just returned by ``coord``."""
    if result.epoch_end is not True:
        return EpochPoints()
    es = coord.epoch_state
    healthy = [c.id for c in es.clients if c.state is ClientState.Healthy]
    share = earning_rate_total_shared // len(healthy) if healthy else 0
    slashed: dict[NodeIdentity, int] = {}
    for c in es.exited_clients:
        if c.state is ClientState.Ejected:
            slashed[c.id] = slashed.get(c.id, 0) + slashing_rate
    return EpochPoints(earned={i: share for i in healthy if share}, slashed=slashed)
