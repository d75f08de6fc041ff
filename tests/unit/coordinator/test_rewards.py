"""Points are credited only for epochs that end successfully; ejected clients are slashed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from psyche.coordinator import Coordinator, RunState
from psyche.coordinator.rewards import epoch_points
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.protocol.run_file import load_run_config

TINY = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"


def make(n: int = 3, **cfg: int) -> Sim:
    rc = load_run_config(TINY)
    config = dataclasses.replace(rc.config, **cfg)
    return Sim(
        Coordinator(run_id="t", config=config, model=rc.model, run_state=RunState.WaitingForMembers)
    )


def test_failed_warmup_pays_nothing() -> None:
    s = make(3)
    ids = [sim_identity(i) for i in range(3)]
    s.tick(ids)
    s.advance(2)
    s.tick(ids)
    assert s.coord.run_state is RunState.Warmup
    s.withdraw(0)
    s.withdraw(1)
    s.advance(1)
    result = s.tick(ids)
    assert result.epoch_end is False
    assert epoch_points(s.coord, result, 900, 5).earned == {}


def test_successful_epoch_shares_points_and_slashes_ejected() -> None:
    s = make(3, total_steps=4)
    ids = [sim_identity(i) for i in range(3)]
    s.tick(ids)
    s.advance(2)
    s.tick(ids)
    s.send_warmup_witnesses()
    result = None
    s.silent.add(ids[2])
    for _ in range(40):
        if s.coord.run_state is RunState.RoundTrain:
            s.send_round_witnesses()
            report = s.unhealthy_report()
            if report and s.coord.current_round().height >= 2:
                s.health_check(ids[0], report)
        s.advance(31)
        result = s.tick(ids)
        if result.epoch_end is not None:
            break
    assert result is not None and result.epoch_end is True
    points = epoch_points(s.coord, result, 900, 5)
    assert points.earned == {ids[0]: 450, ids[1]: 450}
    assert points.slashed == {ids[2]: 5}
