"""The config rules are complete: no mutant of config/tiny/state.toml that the rules accept fails
to run, and the timing/counter rules refuse only configs that cannot run.

"Cannot run" comes from driving the coordinator (``config_sim.cannot_run``), not from the rules.
The mutants edit the numbers of ``[config]`` (and the model's cold-start steps) to values spread
over each type's whole range, boundaries included; ``python tests/unit/protocol/config_sim.py``
is not needed for CI, the test below draws its own.
"""

from __future__ import annotations

import copy
import random
import tomllib
from pathlib import Path
from typing import Any

import pytest

from psyche.protocol.run_file import run_config_from_obj
from psyche.protocol.strict_obj import ConfigError

from .config_sim import cannot_run

ROOT = Path(__file__).resolve().parents[3]
TINY = tomllib.loads((ROOT / "config" / "tiny" / "state.toml").read_text())

BITS = {
    "warmup_time": 64, "cooldown_time": 64, "max_round_train_time": 64, "round_witness_time": 64,
    "global_batch_size_warmup_tokens": 64, "epoch_time": 64, "total_steps": 32,
    "init_min_clients": 16, "min_clients": 16, "witness_nodes": 16,
    "global_batch_size_start": 16, "global_batch_size_end": 16,
    "waiting_for_members_extra_time": 8,
}  # fmt: skip
TIMING_RULES = ("the step counter", "the epoch counter", "the u64 clock")
"""Messages of the rules this suite pins: each refusal by them must be a config that cannot run."""


def draw(rng: random.Random, bits: int, current: int) -> int:
    top = 2**bits - 1
    kind = rng.randrange(4)
    if kind == 0:
        return rng.choice([0, 1, 2, 3, top, top - 1, top - 2, top // 2])
    if kind == 1:
        return min(top, current + rng.randint(-current, 3 * current + 3))
    return min(top, int(2 ** rng.uniform(0, bits)))  # log-uniform over the range


def mutant(rng: random.Random) -> dict[str, Any]:
    doc = copy.deepcopy(TINY)
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(sorted(BITS))
        doc["config"][key] = draw(rng, BITS[key], doc["config"][key])
    if rng.random() < 0.1:
        doc["model"]["LLM"]["cold_start_warmup_steps"] = rng.choice([0, 1, 2, 5, 50, 2**32 - 1])
    return doc


def verdicts(n: int, seed: int) -> tuple[list[str], list[str], int]:
    """(accepted but cannot run, refused by the timing rules but runs, accepted count)."""
    rng = random.Random(seed)
    accepted_bad, refused_good, accepted = [], [], 0
    for _ in range(n):
        doc = mutant(rng)
        rc = run_config_from_obj(doc, require_run_id=True)
        try:
            rc.check()
        except ConfigError as e:
            if any(marker in str(e) for marker in TIMING_RULES):
                # Refused by the rules under test alone? Then it must really not run.
                why = cannot_run(rc)
                if why is None:
                    refused_good.append(f"{doc['config']}: {e}")
            continue
        accepted += 1
        why = cannot_run(rc)
        if why is not None:
            accepted_bad.append(f"{doc['config']}: {why}")
    return accepted_bad, refused_good, accepted


def test_no_mutant_that_passes_the_rules_fails_to_run() -> None:
    bad, over, accepted = verdicts(600, seed=28)
    assert accepted > 100, accepted  # the mutants reach the simulator, not only the rules
    assert not bad, f"{len(bad)} accepted configs cannot run, e.g. {bad[:3]}"
    assert not over, f"{len(over)} refused configs run fine, e.g. {over[:3]}"


@pytest.mark.parametrize(
    ("edits", "field"),
    [
        # The epoch counter (u16) cannot hold the epochs: 8 steps per slowest tiny epoch.
        ({"total_steps": 65535 * 8 + 2}, "config.total_steps"),
        # Steps reach total_steps + 2 (drain): more than a u32 holds.
        ({"total_steps": 2**32 - 2, "epoch_time": 2**63}, "config.total_steps"),
        # A Cooldown (or any phase) whose deadline lies beyond the u64 clock never times out.
        ({"cooldown_time": 2**64 - 2**32}, "config.cooldown_time"),
        ({"warmup_time": 2**64 - 2**32, "epoch_time": 2**64 - 1}, "config.warmup_time"),
    ],
)
def test_configs_that_cannot_run_are_refused(edits: dict[str, int], field: str) -> None:
    doc = copy.deepcopy(TINY)
    doc["config"].update(edits)
    rc = run_config_from_obj(doc, require_run_id=True)
    assert cannot_run(rc) is not None
    with pytest.raises(ConfigError, match=rf"^{field} \("):
        rc.check()


def test_the_last_runnable_total_steps_runs_and_passes() -> None:
    for edits in (
        {"total_steps": 65535 * 8 + 1},
        {"total_steps": 2**32 - 3, "epoch_time": 2**63},
        {"cooldown_time": 2**64 - 1 - 2**32},
    ):
        doc = copy.deepcopy(TINY)
        doc["config"].update(edits)
        rc = run_config_from_obj(doc, require_run_id=True)
        assert cannot_run(rc) is None, edits
        rc.check()
