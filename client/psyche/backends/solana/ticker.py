"""Predicting ``tick`` on a Solana run: nobody ticks a chain, so clients do.

See docs/solana.md, "Python side".

Every 500 ms each client runs the Python coordinator's ``tick`` on a copy of the latest snapshot
with its own clock. Only when the copy changes phase is a ``tick`` transaction worth its fee, and
then each client sends it with probability ``min(1, 2/#clients)``, so on average two of them do
(enough for one to land; a redundant tick is a no-op on chain). In WaitingForMembers the pending
list is the registered clients that joined for this epoch, as the program computes it.
"""

from __future__ import annotations

from psyche.coordinator import CoordinatorException, RunState
from psyche.solana.snapshot import RunSnapshot

__all__ = ["predicts_transition", "tick_probability"]


def predicts_transition(snap: RunSnapshot, now: int) -> bool:
    """Would ``tick`` at unix time ``now`` change the run's phase?"""
    coord = snap.coordinator
    if coord.run_state.halted:
        return False
    waiting = coord.run_state is RunState.WaitingForMembers
    sim = coord.clone()
    try:
        # The seed only shapes the next round's randomness, never whether the phase changes.
        sim.tick(snap.pending() if waiting else None, now, 0)
    except CoordinatorException:
        return False
    return sim.run_state is not coord.run_state


def tick_probability(snap: RunSnapshot) -> float:
    """``min(1, 2/#clients)``: #clients is the epoch's clients, or the pending ones while
    waiting for members."""
    coord = snap.coordinator
    if coord.run_state is RunState.WaitingForMembers:
        n = len(snap.pending())
    else:
        n = len(coord.epoch_state.clients)
    return min(1.0, 2.0 / max(1, n))
