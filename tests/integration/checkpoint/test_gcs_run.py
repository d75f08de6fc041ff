"""A run that keeps its checkpoints in a GCS bucket, end to end (issue 28, item 4): real round
engines, coordinator, torch training and DisTrO (the simulated run's clock and in-memory
network), google-cloud-storage against a local emulator the test starts.

The run creator puts the initial model in the bucket; the first epoch's clients load it from
there; at Cooldown the elected checkpointer uploads the epoch's weights beside it and reports that
step; every client then leaves, and the next epoch's joiners (new clients: nobody to fetch from by
P2P, so the coordinator names the bucket again) load that step from GCS and hold exactly the
weights the first epoch ended with, as a joiner loads a Hub checkpoint."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from psyche.checkpoint.gcs import upload_checkpoint
from psyche.coordinator import RunState
from psyche.data.prepare import ByteTokenizer, prepare_corpus
from psyche.data.synth import synth_corpus
from psyche.events import ApplyEvent, ModelLoadedEvent, UploadEvent, read_events
from psyche.protocol.locations import GcsCheckpoint, GcsRepo, P2PGcsCheckpoint
from psyche.protocol.model import LLM
from psyche.protocol.run_file import load_run_config
from psyche.simulation.run import SimulatedRun
from psyche.training import Preset, write_model_dir
from unit.checkpoint.gcs_emulator import BUCKET, emulator

__all__ = ["emulator"]  # the fixture, used by name

TINY = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"
SMALL = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=64)
PREFIX = "runs/gcs-run"

pytestmark = pytest.mark.slow


def test_cooldown_uploads_to_the_bucket_and_the_next_epochs_joiners_load_it(
    emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PSYCHE_GCS_CACHE", str(tmp_path / "gcs-cache"))
    rc = load_run_config(TINY)
    assert isinstance(rc.model, LLM)
    # Short epochs on the simulated clock: a few rounds each, the run far from its last step.
    config = dataclasses.replace(
        rc.config, warmup_time=3, epoch_time=10, max_round_train_time=5, cooldown_time=30,
        total_steps=1000,
    )  # fmt: skip
    rc = dataclasses.replace(rc, config=config)
    write_model_dir(tmp_path / "model", preset=SMALL, seed=0)
    synth_corpus(tmp_path / "text", 40_000, seed=0)
    prepare_corpus([tmp_path / "text"], ByteTokenizer(), tmp_path / "data", seq_len=64)
    # The run creator's initial model, as step 0 of the run's prefix.
    assert upload_checkpoint(tmp_path / "model", BUCKET, PREFIX, 0) == f"{PREFIX}/step-0"
    run = SimulatedRun(
        rc, tmp_path / "model", tmp_path / "data", tmp_path / "out", n_clients=3,
        model_checkpoint=GcsCheckpoint(GcsRepo(bucket=BUCKET, prefix=PREFIX)),
        # Joiners that see the stored P2PGcs checkpoint before Warmup look for peers to fetch it
        # from until the epoch starts: time must pass for them, as a real clock's would.
        stall_after_s=1.0,
    )  # fmt: skip
    first, joiners = [0, 1, 2], [10, 11, 12]

    async def two_epochs() -> None:
        await run.run(max_epochs=1)  # every client is stopped when it returns
        stored = run.coordinator.llm.checkpoint
        assert isinstance(stored, P2PGcsCheckpoint), stored
        assert run.coordinator.run_state is RunState.WaitingForMembers
        run.n_clients = 0
        for i in joiners:
            run.start_client(i)
        await run.run(max_epochs=2)

    asyncio.run(two_epochs())
    assert run.summary.epochs_completed == 2, run.summary
    assert all(r.hashes_agree for r in run.summary.rounds), run.summary.rounds

    def events(i: int) -> list[object]:
        return list(read_events(tmp_path / "out" / "events" / f"client-{i}.jsonl"))

    loaded = {i: [e for e in events(i) if isinstance(e, ModelLoadedEvent)] for i in first + joiners}
    # Epoch 0: every client loaded the creator's model from the bucket.
    assert {loaded[i][0].source for i in first} == {"Gcs"}, loaded
    uploads = [e for i in first for e in events(i) if isinstance(e, UploadEvent)]
    assert len(uploads) == 1, uploads  # one elected checkpointer (3 clients)
    step = uploads[0].step
    assert (uploads[0].repo, uploads[0].revision) == (f"gs://{BUCKET}", f"{PREFIX}/step-{step}")
    last_hash = [e for i in first for e in events(i) if isinstance(e, ApplyEvent)][-1].model_hash
    # Epoch 1: new clients, nobody to fetch from, so they loaded the uploaded step from GCS:
    # exactly the weights epoch 0 ended with.
    for i in joiners:
        assert [(e.source, e.model_hash) for e in loaded[i]] == [("Gcs", last_hash)], loaded[i]
    assert (tmp_path / "gcs-cache" / BUCKET / PREFIX / f"step-{step}").is_dir()
    trained = {r.epoch for r in run.summary.rounds if r.trained}
    assert trained == {0, 1}, run.summary.rounds
