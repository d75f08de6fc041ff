"""The cold-start LR ramp and residual reset that every client derives from the coordinator
(docs/protocol.md, "Batch size, data index and cold start"): the first rounds of an epoch after a
pause ramp the train, lookahead and apply LRs by `(step − start)/cold_start_warmup_steps`, and
round 0 zeroes the DisTrO residual."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from psyche.coordinator import Coordinator, RunState
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.daemon.rounds import cold_start_bounds, round_lrs, round_state_for
from psyche.protocol.model import LLM
from psyche.protocol.run_file import load_run_config

TINY = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"
WARMUP = 4


def epoch_sim(*, after_pause: bool, warmup_steps: int = WARMUP) -> Sim:
    """config/tiny with `warmup_steps` of cold-start ramp, in its first RoundTrain."""
    rc = load_run_config(TINY)
    assert isinstance(rc.model, LLM)
    model = dataclasses.replace(rc.model, cold_start_warmup_steps=warmup_steps)
    s = Sim(Coordinator(run_id="t", config=rc.config, model=model,
                        run_state=RunState.WaitingForMembers))  # fmt: skip
    if after_pause:
        s.pause()
        s.resume()
    ids = [sim_identity(i) for i in range(3)]
    s.tick(ids)
    s.advance(2)
    s.tick(ids)
    s.send_warmup_witnesses()
    assert s.coord.run_state is RunState.RoundTrain
    return s


def next_round(s: Sim) -> None:
    s.send_round_witnesses()
    s.advance(s.coord.config.round_witness_time)
    s.tick()
    assert s.coord.run_state is RunState.RoundTrain


def plans(s: Sim, rounds: int) -> list[tuple[int, int, float, float, bool]]:
    out = []
    for _ in range(rounds):
        state = round_state_for(s.coord)
        lrs = round_lrs(s.coord, state.step, state.height)
        out.append((state.height, state.step, lrs.lr, lrs.prev_lr, lrs.zero_optim))
        next_round(s)
    return out


def test_lrs_ramp_and_residual_is_zeroed_in_a_cold_start_epoch() -> None:
    s = epoch_sim(after_pause=True)
    start = s.coord.epoch_state.start_step
    assert cold_start_bounds(s.coord) == (start, start + WARMUP)
    schedule = s.coord.llm.lr_schedule

    def expected(step: int) -> float:
        return schedule.get_lr(step) * min(1.0, (step - start) / WARMUP)

    got = plans(s, 6)
    assert [h for h, *_ in got] == list(range(6))
    for height, step, lr, prev_lr, zero_optim in got:
        assert step == start + height
        # The apply at this round's start uses `lr` too, the LR of the current step
        # (docs/protocol.md, "Applying results").
        assert lr == pytest.approx(expected(step), abs=0, rel=1e-15)
        prev = step - 1
        prev_expected = schedule.get_lr(prev) * (
            min(1.0, (prev - start) / WARMUP) if prev >= start else 1.0
        )
        assert prev_lr == pytest.approx(prev_expected, abs=0, rel=1e-15)
        assert zero_optim is (height == 0)
    # The ramp really bites: round 0 trains with LR 0 and round 2 with half the schedule's LR.
    assert got[0][2] == 0.0 and got[2][2] == pytest.approx(schedule.get_lr(start + 2) / 2)
    assert got[WARMUP][2] == schedule.get_lr(start + WARMUP)


def test_a_normal_epoch_uses_the_plain_schedule() -> None:
    s = epoch_sim(after_pause=False)
    assert cold_start_bounds(s.coord) is None
    schedule = s.coord.llm.lr_schedule
    for _height, step, lr, prev_lr, zero_optim in plans(s, 3):
        assert lr == schedule.get_lr(step)
        assert prev_lr == schedule.get_lr(max(step - 1, 0))
        assert not zero_optim


def test_cold_start_without_ramp_steps_only_zeroes_the_residual() -> None:
    s = epoch_sim(after_pause=True, warmup_steps=0)
    assert s.coord.epoch_state.cold_start_epoch and cold_start_bounds(s.coord) is None
    schedule = s.coord.llm.lr_schedule
    got = plans(s, 2)
    assert [z for *_, z in got] == [True, False]
    assert [lr for _, _, lr, _, _ in got] == [schedule.get_lr(step) for _, step, *_ in got]


def test_the_warmup_grace_covers_one_model_copy_over_a_home_uplink() -> None:
    from psyche.daemon.warmup import WARMUP_GRACE_S, warmup_grace_s

    assert warmup_grace_s(4_700_000) == WARMUP_GRACE_S  # tiny: the fixed grace
    assert warmup_grace_s(204_000_000) == 204_000_000 / 2_500_000  # medium: 81.6 s at 20 Mbit/s
