"""A SparseLoCo trainer in a run that verifies serves its round's audit chain before it announces
the result that commits to it (real round engines and coordinator, in-memory network).

Announced first, a result whose round was cancelled before the chain went out would be left
without it, and its verifiers would hold "not found" against an honest trainer (a denied state is
a mismatch vote: docs/protocol.md, "SparseLoCo: the inner-step audit").
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from psyche.daemon.audit_serving import AuditBlobs
from psyche.daemon.training import TrainingStep
from psyche.protocol.run_file import load_run_config
from psyche.simulation.run import SimulatedRun

CONFIG = Path(__file__).resolve().parents[2] / "config" / "tiny-sparseloco" / "state.toml"


def test_every_result_is_announced_after_its_chain_is_served(
    tiny_corpus: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: dict[str, list[str]] = defaultdict(list)
    serve_chain, announce = AuditBlobs.publish, TrainingStep._publish

    async def chain(self: AuditBlobs, transport: Any, height: int, trail: Any) -> None:
        order[transport.peer_id].append("chain")
        await serve_chain(self, transport, height, trail)

    async def result(self: TrainingStep, batch: Any, payload: bytes) -> None:
        order[self.parts.transport.peer_id].append("result")
        await announce(self, batch, payload)

    monkeypatch.setattr(AuditBlobs, "publish", chain)
    monkeypatch.setattr(TrainingStep, "_publish", result)
    run = load_run_config(CONFIG)
    run = dataclasses.replace(run, config=dataclasses.replace(run.config, verification_percent=100))
    model, data = tiny_corpus
    sim = SimulatedRun(run, model, data, tmp_path / "run", n_clients=3, checkpoint=False)
    summary = asyncio.run(sim.run())
    assert summary.final_state == "Finished"
    assert all(r.hashes_agree for r in summary.rounds)
    assert len(order) == 3
    for sequence in order.values():
        assert sequence and sequence == ["chain", "result"] * (len(sequence) // 2), sequence
