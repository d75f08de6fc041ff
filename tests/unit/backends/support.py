"""Small coordinators and a hub driver for the centralized-backend unit tests."""

from __future__ import annotations

from collections.abc import Iterable

from psyche.backends.centralized.run_host import RunHost
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import RunState, Witness
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import DummyData, HubCheckpoint, HubRepo
from psyche.protocol.lr_schedules import ConstantLR
from psyche.protocol.model import LLM, LLMArchitecture, LLMDataType
from psyche.protocol.optimizers import DistroOptimizer
from support.configs import two_client_config

T0 = 1_700_000_000


def make_model() -> LLM:
    return LLM(
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


def make_coordinator(run_id: str = "tiny", /, **config: int) -> Coordinator:
    return Coordinator(
        run_id=run_id,
        config=two_client_config(**config),
        model=make_model(),
        run_state=RunState.WaitingForMembers,
        run_state_start_unix_timestamp=T0,
    )


class Clock:
    """Drives a hub with a simulated clock and deterministic seeds."""

    def __init__(self, hub: RunHost, now: int = T0) -> None:
        self.hub = hub
        self.now = now
        self.seed = 0

    def tick(self, seconds: int = 1) -> bool:
        self.now += seconds
        self.seed += 1
        return self.hub.tick(self.now, self.seed)

    def until(self, state: RunState, limit: int = 200) -> None:
        for _ in range(limit):
            if self.hub.coordinator.run_state is state:
                return
            self.tick()
        raise AssertionError(f"never reached {state.name}: {self.hub.coordinator.run_state.name}")

    def warm_up(self, members: Iterable[NodeIdentity]) -> None:
        """Warmup witnesses from ``members`` until training starts."""
        for who in members:
            c = self.hub.coordinator
            if c.run_state is not RunState.Warmup:
                return
            i = c.index_of(who)
            assert i is not None
            w = Witness(WitnessProof(i, i, False), Bloom.empty(), Bloom.empty())
            self.seed += 1
            self.hub.warmup_witness(who, w, self.now, self.seed)

    def epoch_ids(self) -> list[NodeIdentity]:
        return [c.id for c in self.hub.coordinator.epoch_state.clients]
