"""A coordinator driven from waiting for members into its first training round."""

from __future__ import annotations

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.scripted_clients import Sim
from psyche.coordinator.types import RunState
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.model import LLM


def first_round(
    ids: list[NodeIdentity],
    *,
    run_id: str,
    config: CoordinatorConfig,
    model: LLM,
    wait: int | None = None,
) -> Coordinator:
    """A new run's coordinator after ``ids`` join, ``wait`` seconds pass (default: the config's
    ``waiting_for_members_extra_time``) and everyone sends its warmup witness: in RoundTrain of
    the first round."""
    sim = Sim(
        Coordinator(run_id=run_id, config=config, model=model, run_state=RunState.WaitingForMembers)
    )
    sim.tick(ids)
    sim.advance(config.waiting_for_members_extra_time if wait is None else wait)
    sim.tick(ids)
    sim.send_warmup_witnesses()
    assert sim.coord.run_state is RunState.RoundTrain
    return sim.coord
