"""The client flags that change what a round does, in a real run of real round engines
(``psyche.simulation``: real models trained with DisTrO, real coordinator; in-memory network):
``--write-gradients-dir``, ``--optim-stats-steps``, ``--eval-tasks`` (scored at cooldown),
``--dummy-training-delay-secs``, ``--max-concurrent-downloads`` and ``--checkpoint-dir`` on every
client. None of them may change the weights: every client still agrees bit for bit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch

from psyche.daemon.evaluating import EvalOptions
from psyche.daemon.kit import ClientStats
from psyche.daemon.parts import DaemonOptions
from psyche.daemon.witnessing import witness_metadata
from psyche.distro import Distro, PayloadSpec, decode_payload
from psyche.evals import EvalScore, write_synthetic_task
from psyche.events import CheckpointEvent, EvalEvent, OptimStatsEvent, TrainEvent, read_events
from psyche.protocol.model import LLM
from psyche.protocol.optimizers import DistroOptimizer
from psyche.protocol.run_file import load_run_config
from psyche.simulation.run import SimulatedRun
from psyche.training import distro_config, load_model

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"


def test_client_options_in_a_run(tiny_corpus: tuple[Path, Path], tmp_path: Path) -> None:
    model, data = tiny_corpus
    task_dir = tmp_path / "task"
    write_synthetic_task(task_dir, docs=12, seed=0)
    grads = tmp_path / "grads"

    def options(index: int) -> DaemonOptions | None:
        if index == 0:
            return DaemonOptions(
                gradients_dir=grads,
                optim_stats_steps=3,
                max_concurrent_downloads=1,
                evals=EvalOptions(tasks=str(task_dir), max_docs=6, batch_size=4),
            )
        return DaemonOptions(training_delay_s=0.2) if index == 1 else None

    sim = SimulatedRun(
        load_run_config(TINY), model, data, tmp_path / "run", n_clients=3, daemon_options=options
    )
    summary = asyncio.run(asyncio.wait_for(sim.run(), 150))
    assert summary.final_state == "Finished"
    assert all(r.hashes_agree for r in summary.rounds), "a flag changed the weights"

    events = [read_events(tmp_path / "run" / "events" / f"client-{i}.jsonl") for i in (0, 1, 2)]
    trains = [[e for e in ev if isinstance(e, TrainEvent)] for ev in events]
    assert all(trains)

    # --write-gradients-dir: our own payload and each peer payload we verified, byte for byte.
    files = sorted(grads.glob("*.payload"))
    steps = {e.step for t in trains for e in t}
    assert len(files) == sum(len(t) for t in trains), [f.name for f in files]
    assert {int(f.name[4:10]) for f in files} == steps
    spec = _payload_spec(model)
    for f in files:
        step = int(f.name[4:10])
        payload = decode_payload(f.read_bytes(), spec)
        assert payload.step == step
    assert not list(grads.glob("*.tmp"))

    # --optim-stats-steps 3: a record at every third step the client trained.
    stats = [e for e in events[0] if isinstance(e, OptimStatsEvent)]
    assert [e.step for e in stats] == [e.step for e in trains[0] if e.step % 3 == 0]
    assert stats and all(v == v for e in stats for v in e.stats.values())  # no NaN

    # --eval-tasks: one pass at cooldown, over the first 6 docs of the task.
    evals = [e for e in events[0] if isinstance(e, EvalEvent)]
    assert len(evals) == 1
    assert (evals[0].task, evals[0].index, evals[0].docs, evals[0].complete) == (
        "task",
        0,
        6,
        True,
    )
    assert 0.0 <= evals[0].accuracy <= 1.0
    assert not [e for ev in events[1:] for e in ev if isinstance(e, EvalEvent)]

    # --dummy-training-delay-secs 0.2: client 1's results were held back.
    assert all(e.seconds >= 0.2 + e.compute_s - 0.05 for e in trains[1])
    assert all(e.lr is not None and e.tokens > 0 for t in trains for e in t)

    # --checkpoint-dir: every client saved the epoch's weights, not only the elected one.
    saved = [[e for e in ev if isinstance(e, CheckpointEvent)] for ev in events]
    assert all(saved)
    assert len({s[-1].path for s in saved}) == 1


def _payload_spec(model_dir: Path) -> PayloadSpec:
    llm = load_run_config(TINY).model
    assert isinstance(llm, LLM) and isinstance(llm.optimizer, DistroOptimizer)
    model, _ = load_model(model_dir, device="cpu", dtype=torch.float32)
    return Distro(model.named_parameters(), distro_config(llm.optimizer)).payload_spec


def test_witness_metadata_reports_loss_throughput_and_evals() -> None:
    class Parts:
        stats = ClientStats(loss=2.5, tokens_per_sec=1234.0)

    parts = Parts()
    parts.stats.evals = {
        i: EvalScore(
            task=f"t{i}", index=i, accuracy=i / 10, accuracy_norm=0.0, docs=5, complete=True
        )
        for i in range(10)
    }
    meta = witness_metadata(parts, 7)  # type: ignore[arg-type]
    assert (meta.step, meta.loss, meta.tokens_per_sec) == (7, 2.5, 1234.0)
    assert [(e.task, e.value) for e in meta.evals] == [(i, i / 10) for i in range(8)]
