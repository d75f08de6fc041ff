"""The run's progress as the explorer shows it follows the coordinator's own rule: drain rounds
move ``step`` past ``total_steps`` without training, so the shown trained steps never exceed what
was trained, the fraction is clamped, and a Finished run reads finished at 100 %."""

from __future__ import annotations

from pathlib import Path

from psyche.coordinator.types import RunState
from psyche.explorer.observe import observe, progress
from psyche.explorer.schema import open_engine
from psyche.explorer.store import Store
from support.configs import four_client_config
from unit.coordinator import support

RS = RunState


def test_progress_through_a_whole_run_matches_the_trained_rounds(tmp_path: Path) -> None:
    sim = support.make_sim(four_client_config(total_steps=5))
    store = Store(open_engine(str(tmp_path / "db.sqlite")))
    run = store.run("centralized:test:test", "centralized", "test", "test")
    trained: set[int] = set()
    seq = 0

    def shown() -> dict[str, object]:
        nonlocal seq
        store.record_state(run, observe(sim.coord, seq))
        seq += 1
        got = store.get_run(run)
        assert got is not None
        listed = [r for r in store.runs(10) if r["id"] == run]
        assert listed and listed[0]["progress"] == got["progress"]
        return dict(got["progress"])

    support.to_warmup(sim)
    assert shown() == {"trained_steps": 0, "steps_to_train": 4, "fraction": 0.0, "finished": False}
    sim.send_warmup_witnesses()
    while sim.coord.run_state is not RS.Cooldown:
        rnd = sim.coord.current_round()
        step = sim.coord.epoch_state.start_step + rnd.height
        support.finish_round(sim)
        if sim.coord.round_trained(rnd):
            trained.add(step)
        p = shown()
        assert p["trained_steps"] == len(trained), (p, sorted(trained))
        assert 0.0 <= float(p["fraction"]) <= 1.0 and not p["finished"]
    sim.advance(sim.coord.config.cooldown_time)
    sim.tick()
    assert sim.coord.run_state is RS.Finished
    assert sim.coord.progress.step > sim.coord.config.total_steps  # the drain rounds
    p = shown()
    assert p == {"trained_steps": len(trained), "steps_to_train": 4, "fraction": 1.0,
                 "finished": True}  # fmt: skip
    assert sorted(trained) == [1, 2, 3, 4]


def test_progress_is_clamped() -> None:
    assert progress(0, 5, "WaitingForMembers")["trained_steps"] == 0
    assert progress(99, 5, "RoundTrain")["fraction"] == 1.0
    assert progress(3, 0, "RoundTrain") == {
        "trained_steps": 0, "steps_to_train": 0, "fraction": 0.0, "finished": False,
    }  # fmt: skip
    assert progress(10, 50, "Cooldown", last_step=8)["trained_steps"] == 5
