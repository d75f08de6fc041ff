"""A SparseLoCo trainer in a run that verifies serves its round's audit chain before it announces
the result that commits to it (real round engines and coordinator, in-memory network).

Announced first, a result whose round was cancelled before the chain went out would be left
without it, and its verifiers would hold "not found" against an honest trainer (a denied state is
a mismatch vote: docs/protocol.md, "SparseLoCo: the inner-step audit").
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from psyche.coordinator import ClientState, Coordinator
from psyche.daemon.audit_serving import AuditBlobs
from psyche.daemon.kit import ModelKit
from psyche.daemon.training import TrainingStep
from psyche.p2p.memory import MemoryTransport
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.run_file import RunConfig, load_run_config
from psyche.simulation.run import SimulatedRun
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

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


def _short_run() -> RunConfig:
    """The SparseLoCo run verifying every result, with short round timeouts (the simulated run
    waits them out in real time); two clients start an epoch, since an ejected one sits out the
    next (the coordinator's rule)."""
    run = load_run_config(CONFIG)
    config = dataclasses.replace(
        run.config,
        verification_percent=100,
        max_round_train_time=4,
        warmup_time=5,
        init_min_clients=2,
    )
    return dataclasses.replace(run, config=config)


def _run_watching(
    run: RunConfig,
    corpus: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kit_of: Callable[[int, ModelKit], ModelKit],
    who: NodeIdentity,
) -> tuple[Any, set[ClientState]]:
    """A simulated run of 3 clients (``kit_of`` shaping each one's kit): its summary, and every
    state the coordinator gave ``who``."""
    states: set[ClientState] = set()
    on_publish = SimulatedRun._on_publish

    def watch(self: SimulatedRun, c: Coordinator) -> None:
        seen = (*c.epoch_state.clients, *c.epoch_state.exited_clients)
        states.update(x.state for x in seen if x.id == who)
        on_publish(self, c)

    monkeypatch.setattr(SimulatedRun, "_on_publish", watch)
    model, data = corpus
    sim = SimulatedRun(
        run, model, data, tmp_path / "run", n_clients=3, checkpoint=False, on_kit=kit_of
    )
    return asyncio.run(sim.run()), states


def test_a_client_that_cannot_write_its_chain_drops_its_rounds_and_only_it_pays(
    tiny_corpus: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One client's blob directory is gone (a full disk reads the same): each of its rounds is
    dropped with one error line, its process goes on, and the others finish the run in
    agreement. (Short round timeouts: the simulated run waits them out in real time.)"""
    run = _short_run()
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


def test_a_free_rider_whose_host_stays_silent_is_caught_by_its_probe(
    tiny_corpus: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Client 0 trains every inner step on half its samples and its host never answers a
    request for its states (no "not found": silence, which a slow honest link also shows).
    Before the probe its every audit was left unchecked and it was paid like the others; now
    each verifier replays the probe of inner step 0 its result carries, votes mismatch, and the
    coordinator ejects it while the others finish in agreement. Its silence costs no other
    trainer its audit."""
    caplog.set_level(logging.INFO, logger="psyche.daemon")
    run = _short_run()
    rider = SimulatedRun.key_of(0).node_identity()
    rider_peer = peer_id_for(rider.p2p_identity)

    def kit_of(index: int, kit: ModelKit) -> ModelKit:
        trainer = kit.trainer
        if index == 0 and isinstance(trainer, SparseLoCoTrainer):

            def half_step(part: torch.Tensor, lr: float, cancel: Any) -> float:
                half = part[: max(1, part.shape[0] // 2)]
                return SparseLoCoTrainer._inner_step(trainer, half, lr, cancel)

            trainer._inner_step = half_step  # type: ignore[method-assign]
        return kit

    fetch = MemoryTransport.fetch

    async def silent(self: MemoryTransport, blob_hash: bytes, **kw: Any) -> bytes:
        if list(kw["from_any_of"]) == [rider_peer]:
            await asyncio.sleep(kw.get("timeout", 600.0))
            raise TimeoutError("no answer")
        return await fetch(self, blob_hash, **kw)

    monkeypatch.setattr(MemoryTransport, "fetch", silent)
    summary, states = _run_watching(run, tiny_corpus, tmp_path, monkeypatch, kit_of, rider)
    assert summary.final_state == "Finished"
    assert all(r.hashes_agree for r in summary.rounds)
    lines = [r.getMessage() for r in caplog.records]
    caught = [m for m in lines if "MISMATCH (its probe of inner step 0" in m]
    assert caught and all(f" {rider.hex()[:8]}: " in m for m in caught), caught
    # The honest slots were fetched beside the rider's, so its silence did not spend their
    # budget: none of them fell back to its probe (asked one after another, they did).
    assert not any("its probe of inner step 0 holds" in m for m in lines)
    assert any(re.search(r"audited step \d+ slot \d+ \w+: step \d+ of \d+ match", m) for m in lines)
    assert ClientState.Ejected in states


def test_a_trainer_that_swamps_its_gradient_with_its_moments_is_ejected(
    tiny_corpus: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Client 0 computes no gradient at all: its inner moments are 1e8 (kept from round to
    round, so its chain carries on) and each inner step takes a zero gradient. AdamW rounds any
    gradient away next to such moments, so a verifier's replay lands where it committed: until
    2026-12-06 every audit of it passed. Now each replay must show the verifier's own gradient
    in its first moment, the verifiers vote mismatch, and the coordinator ejects it while the
    others finish in agreement."""
    caplog.set_level(logging.INFO, logger="psyche.daemon")
    run = _short_run()
    rogue = SimulatedRun.key_of(0).node_identity()

    def kit_of(index: int, kit: ModelKit) -> ModelKit:
        trainer = kit.trainer
        if index == 0 and isinstance(trainer, SparseLoCoTrainer):

            def no_work(part: torch.Tensor, lr: float, cancel: Any) -> float:
                inner = trainer._inner
                gen = torch.Generator().manual_seed(3)
                for p in trainer.params:
                    if "exp_avg" not in inner.state.get(p, {}):
                        inner.state[p] = {
                            "step": torch.tensor(100.0),
                            "exp_avg": 1e8 * torch.randn(p.shape, generator=gen).to(p.dtype),
                            "exp_avg_sq": torch.full_like(p, 1e16),
                        }
                    p.grad = torch.zeros_like(p)
                for group in inner.param_groups:
                    group["lr"] = lr
                inner.step()
                return 5.0

            trainer._inner_step = no_work  # type: ignore[method-assign]
        return kit

    summary, states = _run_watching(run, tiny_corpus, tmp_path, monkeypatch, kit_of, rogue)
    assert summary.final_state == "Finished"
    assert all(r.hashes_agree for r in summary.rounds)
    flat = " ".join(" ".join(r.getMessage() for r in caplog.records).split())
    hidden = [
        float(x) for x in re.findall(r"MISMATCH \(inner step \d+ .*?, (\S+) of the gradient", flat)
    ]
    assert any(h > 100 for h in hidden), hidden  # caught by the hidden gradient itself
    assert ClientState.Ejected in states
