"""The coordinator: one pure, deterministic state machine.

See docs/protocol.md, "Coordinator state machine" and "Witnesses and consensus".

Hosted by the TCP server, mirrored by the Solana program (kept identical by ``tests/vectors``) and
run by clients to predict transitions. No I/O, no clock, no global RNG, no torch.
"""

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import (
    Client,
    ClientState,
    CoordinatorErrorCode,
    CoordinatorException,
    EpochState,
    EvalResult,
    Progress,
    Round,
    RunState,
    TickResult,
    Witness,
    WitnessMetadata,
)
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.model import LLM, Model

__all__ = [
    "LLM",
    "Client",
    "ClientState",
    "Coordinator",
    "CoordinatorConfig",
    "CoordinatorErrorCode",
    "CoordinatorException",
    "EpochState",
    "EvalResult",
    "Model",
    "Progress",
    "Round",
    "RunState",
    "TickResult",
    "Witness",
    "WitnessMetadata",
]
