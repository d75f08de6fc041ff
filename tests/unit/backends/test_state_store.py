"""Saved states: file names, newest-first restore, and what a restore keeps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.state_store import StateStore, restore_progress
from psyche.coordinator import state_json as serde
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.scripted_clients import sim_identity
from psyche.coordinator.types import Client, RunState
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import HubCheckpoint, HubRepo, P2PCheckpoint

from .support import Clock, make_coordinator


def _after_epoch(step: int = 7, epoch: int = 2, run_id: str = "tiny") -> Coordinator:
    c = make_coordinator(run_id)
    c.progress.step, c.progress.epoch, c.progress.epoch_start_data_index = step, epoch, 24
    c.epoch_state.clients = [Client(sim_identity(1))]
    c.epoch_state.cold_start_epoch = True
    c.model = dataclasses.replace(c.llm, checkpoint=P2PCheckpoint(HubRepo(repo_id="saved/model")))
    return c


def test_save_writes_full_json_named_after_run_and_step(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "states", "tiny")
    path = store.save(_after_epoch())
    assert path == tmp_path / "states" / "tiny-step7.json"
    assert serde.to_json(serde.from_json(path.read_bytes())) == serde.to_json(_after_epoch())
    assert not list(path.parent.glob("*.tmp"))


def test_newest_valid_state_of_this_run_wins(tmp_path: Path) -> None:
    store = StateStore(tmp_path, "tiny")
    store.save(_after_epoch(step=3))
    store.save(_after_epoch(step=12))
    store.save(_after_epoch(step=9))
    (tmp_path / "tiny-step40.json").write_text("{truncated")
    StateStore(tmp_path, "tiny2").save(_after_epoch(step=50, run_id="tiny2"))
    (tmp_path / "tiny-step41.json").write_text(serde.to_json(_after_epoch(run_id="other")))
    (tmp_path / "notes.txt").write_text("hi")
    found = store.load_newest()
    assert found is not None
    state, path = found
    assert path.name == "tiny-step12.json"
    assert state.progress.step == 12


def test_empty_or_missing_directory_has_no_state(tmp_path: Path) -> None:
    assert StateStore(tmp_path / "nope", "tiny").load_newest() is None
    assert StateStore(tmp_path, "tiny").load_newest() is None


def test_run_ids_that_are_not_file_names_are_escaped(tmp_path: Path) -> None:
    store = StateStore(tmp_path, "a/b c")
    path = store.save(_after_epoch(run_id="a/b c"))
    assert path.parent == tmp_path
    assert path.name == "a%2Fb%20c-step7.json"
    assert store.load_newest() is not None


def test_save_refuses_another_runs_state(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="other"):
        StateStore(tmp_path, "tiny").save(_after_epoch(run_id="other"))


def test_restore_keeps_progress_and_checkpoint_and_clears_the_epoch() -> None:
    base = make_coordinator(epoch_time=40)
    saved = _after_epoch()
    saved.run_state = RunState.WaitingForMembers
    saved.epoch_state.lost = [BatchId(30, 31)]
    out = restore_progress(base, saved)
    assert out.epoch_state.lost == [BatchId(30, 31)], "queued lost work survives a restart"
    assert out.epoch_state.lost is not saved.epoch_state.lost
    assert (out.progress.epoch, out.progress.step, out.progress.epoch_start_data_index) == (
        2,
        7,
        24,
    )
    assert out.llm.checkpoint == P2PCheckpoint(HubRepo(repo_id="saved/model"))
    assert out.epoch_state.clients == [] and out.epoch_state.cold_start_epoch
    assert out.run_state is RunState.WaitingForMembers
    assert out.config.epoch_time == 40, "the config comes from state.toml"
    assert base.progress.step == 1 and base.llm.checkpoint == HubCheckpoint(
        HubRepo(repo_id="psyche/test")
    ), "inputs untouched"


@pytest.mark.parametrize(
    ("saved_state", "step", "expect"),
    [
        (RunState.Paused, 7, RunState.Paused),
        (RunState.Finished, 7, RunState.Finished),
        (RunState.WaitingForMembers, 100, RunState.Finished),
    ],
)
def test_restore_keeps_a_halted_run_halted(
    saved_state: RunState, step: int, expect: RunState
) -> None:
    saved = _after_epoch(step=step)
    saved.run_state = saved_state
    assert restore_progress(make_coordinator(), saved).run_state is expect


def test_hub_saves_at_each_successful_epoch_end_and_restores(tmp_path: Path) -> None:
    store = StateStore(tmp_path, "tiny")
    hub = RunHost(make_coordinator(), on_epoch_end=store.save)
    clock = Clock(hub)
    a, b = sim_identity(1), sim_identity(2)
    hub.join(a)
    hub.join(b)
    clock.until(RunState.Warmup)
    clock.warm_up([a])
    clock.until(RunState.Cooldown)
    clock.until(RunState.WaitingForMembers)
    found = store.load_newest()
    assert found is not None
    assert found[1].name == "tiny-step2.json"
    restored = restore_progress(make_coordinator(), found[0])
    assert (restored.progress.epoch, restored.progress.step) == (1, 2)
    assert restored.progress.epoch_start_data_index == 4
