"""A client that starts a round after its peers still applies exactly the consensus set.

Real engines, coordinator and run host, real models trained with DisTrO (``psyche.simulation``:
in-memory network, simulated clock). Client 2 sees the RoundTrain state of one round a simulated
second after the others (as a Solana client whose account notification comes late, or whose
state loop is still busy with the previous state): by the time its round starts, its peers have
trained and announced their results for it.

Before the fix client 2 refused those results (``future_result``: "a result that arrives before
this client starts its round is lost"), and two rounds later applied only its own of the three
results the witnesses agreed on: its weights differed from its peers' from then on (seen on a
Solana local testnet: "weights 2 distinct" after a timed-out round near an epoch's end). Now the
early results are held for the round and taken when it starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from psyche.coordinator import Coordinator, RunState
from psyche.events import ApplyEvent, read_events
from psyche.protocol.model import LLM
from psyche.protocol.run_file import RunConfig, load_run_config
from psyche.simulation.run import RunSummary, SimulatedRun

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"
LATE = 2
"""The client that sees the round's state late."""
LATE_HEIGHT = 2


def _config(**changes: Any) -> RunConfig:
    rc = load_run_config(TINY)
    assert isinstance(rc.model, LLM)
    return dataclasses.replace(rc, config=dataclasses.replace(rc.config, **changes))


def test_results_announced_before_a_late_client_starts_its_round_are_applied(
    tiny_corpus: tuple[Path, Path], tmp_path: Path
) -> None:
    model, data = tiny_corpus
    sim = SimulatedRun(_config(total_steps=6, witness_nodes=3), model, data, tmp_path, n_clients=3)
    stashed: list[Coordinator] = []
    seen: dict[str, Any] = {"late": False, "held": -1, "peer_results": 0}

    def prepare(s: SimulatedRun) -> None:
        client = s.start_client(LATE)
        backend = client.backend
        deliver = backend.deliver

        def late_delivery(coord: Coordinator) -> None:
            starts_late_round = (
                not seen["late"]
                and coord.run_state is RunState.RoundTrain
                and coord.current_round().height == LATE_HEIGHT
            )
            if starts_late_round:
                seen["late"] = True
            if starts_late_round or stashed:
                stashed.append(coord)  # this state and any after it, in order, come later
            else:
                deliver(coord)

        backend.deliver = late_delivery  # type: ignore[method-assign]
        advance = s.host.advance

        def advance_then_release(seconds: int = 1) -> None:
            if stashed:
                view = client.engine.held.epoch
                early = getattr(view, "early", None)
                seen["held"] = early.total if early is not None else 0
                seen["peer_results"] = sum(
                    1
                    for i in range(3)
                    if i != LATE
                    for e in read_events(tmp_path / "events" / f"client-{i}.jsonl")
                    if type(e).__name__ == "TrainEvent" and e.step == stashed[0].progress.step
                )
                while stashed:
                    deliver(stashed.pop(0))
            advance(seconds)

        s.host.advance = advance_then_release  # type: ignore[method-assign]

    async def main() -> RunSummary:
        prepare(sim)
        return await sim.run()

    summary = asyncio.run(asyncio.wait_for(main(), 150))
    assert seen["late"], "the late round never came"
    assert seen["peer_results"] == 2, "the peers had not trained the round before client 2 saw it"
    assert summary.final_state == "Finished"

    # Every client's weights are identical after every apply, and client 2 applied every
    # result the witnesses agreed on (three per trained round, as its peers did).
    by_step: dict[int, dict[int, ApplyEvent]] = {}
    for i in range(3):
        for e in read_events(tmp_path / "events" / f"client-{i}.jsonl"):
            if isinstance(e, ApplyEvent):
                by_step.setdefault(e.step, {})[i] = e
    diverged = {
        step: {i: e.model_hash[:12] for i, e in events.items()}
        for step, events in sorted(by_step.items())
        if len({e.model_hash for e in events.values()}) != 1
    }
    assert not diverged, f"weights differ between clients: {diverged}"
    assert all(len(events) == 3 for events in by_step.values())
    late_round_applied = next(ev for ev in by_step.values() if ev[LATE].height == LATE_HEIGHT + 2)
    assert [e.batches for e in late_round_applied.values()] == [3, 3, 3], late_round_applied
    assert all(r.hashes_agree for r in summary.rounds)

    # The peers' results were held for the round, not refused.
    assert seen["held"] >= 2, seen
    assert "future_result" not in _refusals(tmp_path), _refusals(tmp_path)


def _refusals(out: Path) -> dict[str, int]:
    """Client 2's refusals from peers (the last counts its event log reported)."""
    counts: dict[str, int] = {}
    for e in read_events(out / "events" / f"client-{LATE}.jsonl"):
        if type(e).__name__ == "RejectionsEvent":
            counts = dict(e.counts)
    return counts
