"""The user documentation's sample run config (config/seed-sample/config.toml, an older reference
layout) loads: `rounds_per_epoch` becomes `epoch_time`, an absent `cold_start_warmup_steps` is 0,
and a genuinely unknown key is still refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.coordinator.types import RunState
from psyche.protocol.locations import HttpData
from psyche.protocol.model import LLM
from psyche.protocol.run_file import RunConfig, load_run_config, parse_toml, run_config_from_obj
from psyche.protocol.strict_obj import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "config" / "seed-sample" / "config.toml"
TEXT = SAMPLE.read_text()


def edited(old: str, new: str) -> str:
    assert old in TEXT, old
    return TEXT.replace(old, new, 1)


def load(text: str) -> RunConfig:
    rc = run_config_from_obj(parse_toml(text))
    rc.check()
    return rc


def test_the_sample_loads_and_validates() -> None:
    rc = load_run_config(SAMPLE)
    c = rc.config
    # 30 + (20 - 2) * (30 + 1): see test_rounds_per_epoch_keeps_the_round_count.
    assert c.epoch_time == 588
    assert (c.warmup_time, c.cooldown_time, c.max_round_train_time, c.round_witness_time) == (
        30, 30, 30, 1,
    )  # fmt: skip
    assert (c.min_clients, c.init_min_clients, c.witness_nodes, c.total_steps) == (1, 1, 1, 25000)
    assert c.waiting_for_members_extra_time == 3  # absent: the existing default
    llm = rc.model
    assert isinstance(llm, LLM) and llm.cold_start_warmup_steps == 0
    assert isinstance(llm.data_location, HttpData) and llm.max_seq_len == 2048
    assert rc.run_id is None
    assert rc.warnings == (
        "config.rounds_per_epoch = 20 became config.epoch_time = 588 (warmup_time + (20 - 2) x "
        "(max_round_train_time + round_witness_time)): epochs are timed now, so faster rounds "
        "fit more per epoch",
        "model.LLM.cold_start_warmup_steps is absent: using 0",
    )


def test_validate_config_accepts_the_sample_with_a_run_id(tmp_path: Path) -> None:
    # validate-config checks state files, which name their run; the sample is an update-config
    # file, so it is given one here.
    from psyche.cli.server import server

    state = tmp_path / "state.toml"
    state.write_text('run_id = "seed-sample"\n' + TEXT)
    res = CliRunner().invoke(server, ["validate-config", "--state", str(state)])
    assert res.exit_code == 0, res.output
    assert "run 'seed-sample' is valid" in res.output
    assert "rounds_per_epoch = 20 became config.epoch_time = 588" in res.output
    assert "epoch 588" in res.output


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("rounds_per_epoch = 20", "rounds_per_epok = 20", "config.rounds_per_epok: unknown key"),
        ("[model.LLM]\n", "[model.LLM]\ncold_start_warmup_step = 3\n",
         "model.LLM.cold_start_warmup_step: unknown key"),
        ("rounds_per_epoch = 20", "rounds_per_epoch = 20\nepoch_time = 600",
         "config.rounds_per_epoch: give either it (older configs) or config.epoch_time"),
        ("rounds_per_epoch = 20", "rounds_per_epoch = 2",
         "config.rounds_per_epoch (2) must be an integer greater than 2"),
        ("rounds_per_epoch = 20", "rounds_per_epoch = true",
         "config.rounds_per_epoch (True) must be an integer greater than 2"),
        ("round_witness_time = 1\n", "",
         "config.rounds_per_epoch is converted to config.epoch_time from config.warmup_time, "
         "config.max_round_train_time, config.round_witness_time; missing or not an integer: "
         "config.round_witness_time"),
        ("rounds_per_epoch = 20", "", "config.epoch_time: missing key"),
    ],
)  # fmt: skip
def test_bad_or_unknown_keys_are_refused_by_name(old: str, new: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(edited(old, new))
    assert str(e.value).startswith(message), str(e.value)


def test_an_explicit_cold_start_warmup_steps_is_kept() -> None:
    rc = load(edited("[model.LLM]\n", "[model.LLM]\ncold_start_warmup_steps = 5\n"))
    assert isinstance(rc.model, LLM) and rc.model.cold_start_warmup_steps == 5
    assert len(rc.warnings) == 1


def test_rounds_per_epoch_keeps_the_round_count() -> None:
    """When Warmup and every round run to their time limits, an epoch of the converted config
    has rounds_per_epoch rounds, as it had in the older reference (whose last two rounds were
    trained but never applied; here they are the two drain rounds)."""
    for rounds in (3, 7, 20):
        rc = load(edited("rounds_per_epoch = 20", f"rounds_per_epoch = {rounds}"))
        cfg = rc.config
        sim = Sim(Coordinator(run_id="seed", config=cfg, model=rc.model))
        sim.resume()
        sim.advance(cfg.waiting_for_members_extra_time)
        sim.tick([sim_identity(0)])
        assert sim.coord.run_state is RunState.Warmup
        sim.advance(cfg.warmup_time)
        sim.tick()
        heights: list[int] = []
        while sim.coord.run_state is RunState.RoundTrain:
            heights.append(sim.coord.current_round().height)
            sim.send_round_witnesses()  # ends RoundTrain at once ...
            assert sim.coord.run_state is RunState.RoundWitness
            # ... so the whole round's time limit is spent in RoundWitness.
            sim.advance(cfg.max_round_train_time + cfg.round_witness_time)
            sim.tick()
        assert sim.coord.run_state is RunState.Cooldown
        assert len(heights) == rounds, (rounds, heights)
