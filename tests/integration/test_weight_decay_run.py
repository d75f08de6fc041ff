"""A simulated run (real round engines, coordinator, torch training, DisTrO; four clients) with
weight decay and fewer samples per round than clients, so every round has a client without a
batch.

Weight decay is applied inside `generate` by each trainer (docs/distro.md, "Train step"). A
client with no batch (or whose training was cancelled) used to skip it, and its weights drifted
from the others' from the first such round on; now it applies the same decay
(`Trainer.sit_out`), so every client holds the same bits after every apply.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from psyche.data.prepare import ByteTokenizer, prepare_corpus
from psyche.data.synth import synth_corpus
from psyche.protocol.model import LLM
from psyche.protocol.optimizers import DistroOptimizer
from psyche.protocol.run_file import load_run_config
from psyche.simulation.run import SimulatedRun
from psyche.training import Preset, write_model_dir

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"
SMALL = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=64)

pytestmark = pytest.mark.slow


def test_clients_without_a_batch_decay_like_the_trainers(tmp_path: Path) -> None:
    rc = load_run_config(TINY)
    assert isinstance(rc.model, LLM)
    assert isinstance(rc.model.optimizer, DistroOptimizer)
    optimizer = dataclasses.replace(rc.model.optimizer, weight_decay=0.1)
    rc = dataclasses.replace(
        rc,
        model=dataclasses.replace(rc.model, optimizer=optimizer),
        config=dataclasses.replace(
            rc.config,
            global_batch_size_start=3,
            global_batch_size_end=3,
            init_min_clients=4,
            total_steps=6,
        ),
    )
    write_model_dir(tmp_path / "model", preset=SMALL, seed=0)
    synth_corpus(tmp_path / "text", 40_000, seed=0)
    prepare_corpus([tmp_path / "text"], ByteTokenizer(), tmp_path / "data", seq_len=64)
    run = SimulatedRun(rc, tmp_path / "model", tmp_path / "data", tmp_path / "out", n_clients=4)
    summary = asyncio.run(run.run(max_epochs=1))
    assert summary.epochs_completed == 1
    trained = [r for r in summary.rounds if r.loss is not None]
    assert len(trained) >= 3
    assert all(r.hashes_agree for r in summary.rounds), [
        (r.step, r.hashes_agree) for r in summary.rounds
    ]
