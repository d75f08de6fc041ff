"""A simulated run (real round engines, coordinator, torch training, DisTrO; three clients) through
an epoch that follows a pause: the clients' train, lookahead and apply LRs ramp by the cold-start
factor and the DisTrO residual is zeroed in round 0 (docs/protocol.md, "Batch size, data index
and cold start"), and the clients still agree bit for bit."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from psyche.daemon.kit import ModelKit
from psyche.data.prepare import ByteTokenizer, prepare_corpus
from psyche.data.synth import synth_corpus
from psyche.protocol.model import LLM
from psyche.protocol.run_file import load_run_config
from psyche.simulation.run import SimulatedRun
from psyche.training import Preset, write_model_dir

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"
WARMUP = 4
SMALL = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=64)

pytestmark = pytest.mark.slow


def spy(
    run: SimulatedRun,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """Record every client's train and apply calls, passing them on to the real trainer."""
    trains: list[dict[str, Any]] = []
    applies: list[dict[str, Any]] = []

    def on_kit(n: int, kit: ModelKit) -> ModelKit:
        trainer = kit.trainer
        train, apply = trainer.train_step, trainer.apply_step

        def train_step(*args: Any, **kw: Any) -> Any:
            trains.append({"client": n, **{k: kw[k] for k in ("step", "lr", "prev_lr")},
                           "zero_optim": kw["zero_optim"]})  # fmt: skip
            return train(*args, **kw)

        def apply_step(payloads: Any, *, lr: float) -> None:
            applies.append({"client": n, "step": run.coordinator.progress.step, "lr": lr})
            apply(payloads, lr=lr)

        trainer.train_step = train_step  # type: ignore[method-assign]
        trainer.apply_step = apply_step  # type: ignore[method-assign]
        return kit

    return trains, applies, on_kit


def test_cold_start_epoch_ramps_lrs_and_zeroes_the_residual(tmp_path: Path) -> None:
    rc = load_run_config(TINY)
    assert isinstance(rc.model, LLM)
    llm = dataclasses.replace(rc.model, cold_start_warmup_steps=WARMUP)
    rc = dataclasses.replace(rc, model=llm)
    write_model_dir(tmp_path / "model", preset=SMALL, seed=0)
    synth_corpus(tmp_path / "text", 40_000, seed=0)
    prepare_corpus([tmp_path / "text"], ByteTokenizer(), tmp_path / "data", seq_len=64)
    run = SimulatedRun(rc, tmp_path / "model", tmp_path / "data", tmp_path / "out", n_clients=3)
    # A pause before the first epoch makes it a cold-start epoch, as a resume after any pause.
    run.coordinator.pause(run.host.now)
    run.coordinator.resume(run.host.now)
    trains, applies, on_kit = spy(run)
    run.on_kit = on_kit
    summary = asyncio.run(run.run(max_epochs=1))

    start = run.coordinator.epoch_state.start_step
    schedule = llm.lr_schedule

    def lr(step: int) -> float:
        factor = (step - start) / WARMUP if start <= step <= start + WARMUP else 1.0
        return schedule.get_lr(step) * factor

    assert summary.epochs_completed == 1
    assert all(r.hashes_agree for r in summary.rounds)
    steps = sorted({t["step"] for t in trains})
    assert steps[0] == start and len(steps) >= WARMUP + 2
    for t in trains:
        assert t["lr"] == pytest.approx(lr(t["step"]), rel=1e-15, abs=0)
        assert t["prev_lr"] == pytest.approx(lr(max(t["step"] - 1, 0)), rel=1e-15, abs=0)
        assert t["zero_optim"] is (t["step"] == start)
    # Every client trained (or applied) with the ramp, not only some of them.
    assert {t["client"] for t in trains if t["step"] == start} == {0, 1, 2}
    assert trains[0]["lr"] == 0.0
    assert applies, "rounds 2+ apply round h−2"
    for a in applies:
        assert a["lr"] == pytest.approx(lr(a["step"]), rel=1e-15, abs=0)
    ramped = [a for a in applies if a["step"] < start + WARMUP]
    assert ramped and all(a["lr"] < schedule.get_lr(a["step"]) for a in ramped)
