"""Small coordinator configs for tests that drive a `Coordinator` directly.

Two shapes, named for what they build (they were both called ``make_config`` before):

- `four_client_config`: four scripted clients, no witnesses, batch 8, long phases (the
  coordinator state-machine tests step a `Sim` through every phase with it).
- `two_client_config`: two clients, one witness, batch 4, short phases, checked with
  `CoordinatorConfig.check` (the backend, hub and daemon tests run rounds with it).

Keyword overrides replace single fields.
"""

from __future__ import annotations

from psyche.protocol.coordinator_config import CoordinatorConfig


def four_client_config(**overrides: int) -> CoordinatorConfig:
    values: dict[str, int] = {
        "warmup_time": 20,
        "cooldown_time": 10,
        "max_round_train_time": 10,
        "round_witness_time": 2,
        "global_batch_size_warmup_tokens": 0,
        "epoch_time": 60,
        "total_steps": 100,
        "init_min_clients": 4,
        "min_clients": 2,
        "witness_nodes": 0,
        "global_batch_size_start": 8,
        "global_batch_size_end": 8,
        "verification_percent": 0,
        "waiting_for_members_extra_time": 2,
    }
    values.update(overrides)
    return CoordinatorConfig(**values)


def two_client_config(**overrides: int) -> CoordinatorConfig:
    values = {
        "warmup_time": 10,
        "cooldown_time": 2,
        "max_round_train_time": 5,
        "round_witness_time": 1,
        "global_batch_size_warmup_tokens": 0,
        "epoch_time": 30,
        "total_steps": 100,
        "init_min_clients": 2,
        "min_clients": 1,
        "witness_nodes": 1,
        "global_batch_size_start": 4,
        "global_batch_size_end": 4,
        "verification_percent": 0,
        "waiting_for_members_extra_time": 1,
    }
    values.update(overrides)
    cfg = CoordinatorConfig(**values)
    cfg.check()
    return cfg
