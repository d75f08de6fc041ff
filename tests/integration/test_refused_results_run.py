"""A result every client refuses does not hold the round after it until the train limit.

Real round engines, coordinator and run host, real models trained with DisTrO
(``psyche.simulation``: in-memory network, simulated clock). Client 0 signs a commitment to
bytes other than the payload it serves, every round, so every honest client refuses each of its
results as ``bad_payload`` once downloaded (its announcement is its own, signed, and its bytes
are the blob it named: nothing else will come for that batch).

Before the fix an honest client announced ``Finished`` for a round only once it held every
result of the previous one, and a refused result is never held, so the round after each of the
rogue's results ran to ``max_round_train_time`` (every client idle for the rest of it) and its
witnesses went out only when RoundWitness began: on Solana, where they must then land within
``round_witness_time``, they raced a one-second window (the copier e2e test's failure of
2026-12-07). Now a refused result counts as settled, so the rounds end as soon as the honest
work is in, while the rogue is left out of the witnesses and ejected as before.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

import psyche.daemon.training as training
from psyche.coordinator import ClientState, Coordinator
from psyche.events import RejectionsEvent, read_events
from psyche.protocol.commitment import sha256v
from psyche.protocol.identity import SecretKey
from psyche.protocol.run_file import load_run_config
from psyche.simulation.run import SimulatedRun

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"
CLIENTS = 4
ROGUE = 0


def test_a_round_after_a_refused_result_ends_when_the_honest_work_is_in(
    tiny_corpus: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rogue_key = SimulatedRun.key_of(ROGUE)
    rogue = rogue_key.node_identity()
    honest_commitment = training.make_commitment

    def commitment(key: SecretKey, digest: bytes) -> Any:
        if key.node_identity() == rogue:
            digest = sha256v(b"not the payload", digest)
        return honest_commitment(key, digest)

    monkeypatch.setattr(training, "make_commitment", commitment)
    ejected_at: list[int] = []
    on_publish = SimulatedRun._on_publish

    def watch(self: SimulatedRun, c: Coordinator) -> None:
        seen = (*c.epoch_state.clients, *c.epoch_state.exited_clients)
        if any(x.id == rogue and x.state is ClientState.Ejected for x in seen):
            ejected_at.append(c.progress.step)
        on_publish(self, c)

    monkeypatch.setattr(SimulatedRun, "_on_publish", watch)
    run = load_run_config(TINY)
    config = dataclasses.replace(
        run.config, total_steps=8, init_min_clients=CLIENTS, witness_nodes=3
    )
    run = dataclasses.replace(run, config=config)
    model, data = tiny_corpus
    sim = SimulatedRun(run, model, data, tmp_path / "run", n_clients=CLIENTS, checkpoint=False)
    summary = asyncio.run(sim.run(max_epochs=1))

    refused = [
        e.counts.get("bad_payload", 0)
        for i in range(CLIENTS)
        if i != ROGUE
        for e in read_events(tmp_path / "run" / "events" / f"client-{i}.jsonl")
        if isinstance(e, RejectionsEvent)
    ]
    assert refused and max(refused) >= 1, "no honest client refused the rogue's results"
    assert ejected_at, "the rogue was never ejected"
    assert summary.final_state == "Finished"
    assert summary.rounds and all(r.hashes_agree for r in summary.rounds)
    rounds = [(r.step, r.end_reason, r.witnesses) for r in summary.rounds]
    # The round the rogue is ejected in may still run to its limit: an elected witness that
    # is ejected never witnesses, and the coordinator ends a round early only on all of its
    # elected witnesses. Every other round ends as soon as the honest work is in.
    timed_out = {r.step for r in summary.rounds if r.end_reason != "opportunistic"}
    assert timed_out <= {ejected_at[0]}, f"rounds held to the train limit: {rounds}"
    assert len(summary.rounds) == 9, rounds
