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
from psyche.p2p.memory import MemoryTransport
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


def test_a_client_that_cannot_write_its_chain_drops_its_rounds_and_only_it_pays(
    tiny_corpus: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One client's blob directory is gone (a full disk reads the same): each of its rounds is
    dropped with one error line, its process goes on, and the others finish the run in
    agreement. (Short round timeouts: the simulated run waits them out in real time.)"""
    run = load_run_config(CONFIG)
    # Two clients start an epoch: the ejected one sits out the next (the coordinator's rule).
    config = dataclasses.replace(
        run.config,
        verification_percent=100,
        max_round_train_time=4,
        warmup_time=5,
        init_min_clients=2,
    )
    run = dataclasses.replace(run, config=config)
    model, data = tiny_corpus
    sim = SimulatedRun(run, model, data, tmp_path / "run", n_clients=3, checkpoint=False)
    calls: list[str] = []

    def spool_dir(self: MemoryTransport) -> Path | None:
        calls.append(self.peer_id)
        return tmp_path / "gone" if self.peer_id == calls[0] else None

    monkeypatch.setattr(MemoryTransport, "spool_dir", property(spool_dir))
    summary = asyncio.run(sim.run())
    assert summary.final_state == "Finished"
    dropped = [r for r in caplog.records if "cannot write the audit chain" in r.getMessage()]
    assert dropped and dropped[0].levelname == "ERROR"
    assert all(r.hashes_agree for r in summary.rounds)
