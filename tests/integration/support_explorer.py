"""Helpers shared by the explorer's tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from psyche.explorer.store import Store


def count(store: Store, table: Any) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def make_coordinator(run_id: str = "tiny") -> Any:
    """A small coordinator in WaitingForMembers (the config of the backends' unit tests)."""
    from psyche.coordinator.coordinator import Coordinator
    from psyche.coordinator.types import RunState
    from psyche.protocol.coordinator_config import CoordinatorConfig
    from psyche.protocol.locations import DummyData, HubCheckpoint, HubRepo
    from psyche.protocol.lr_schedules import ConstantLR
    from psyche.protocol.model import LLM, LLMArchitecture, LLMDataType
    from psyche.protocol.optimizers import DistroOptimizer

    cfg = CoordinatorConfig(
        warmup_time=10, cooldown_time=2, max_round_train_time=5, round_witness_time=1,
        global_batch_size_warmup_tokens=0, epoch_time=30, total_steps=100, init_min_clients=2,
        min_clients=1, witness_nodes=1, global_batch_size_start=4, global_batch_size_end=4,
        verification_percent=0, waiting_for_members_extra_time=1,
    )  # fmt: skip
    cfg.check()
    model = LLM(
        max_seq_len=8,
        cold_start_warmup_steps=0,
        architecture=LLMArchitecture.HfLlama,
        checkpoint=HubCheckpoint(HubRepo(repo_id="psyche/test")),
        data_type=LLMDataType.Pretraining,
        data_location=DummyData(),
        lr_schedule=ConstantLR(base_lr=1e-3, warmup_steps=0, warmup_init_lr=0.0),
        optimizer=DistroOptimizer(
            compression_decay=0.999, compression_topk=8, compression_chunk=64, quantize_1bit=True
        ),
    )
    return Coordinator(
        run_id=run_id, config=cfg, model=model, run_state=RunState.WaitingForMembers,
        run_state_start_unix_timestamp=1_700_000_000,
    )  # fmt: skip
