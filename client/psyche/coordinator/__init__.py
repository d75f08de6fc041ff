"""The coordinator: one pure, deterministic state machine (SPEC §1–2).

Hosted by the TCP server, mirrored by the Solana program (kept identical by ``tests/vectors``) and
run by clients to predict transitions. No I/O, no clock, no global RNG, no torch.
"""

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import (
    Client,
    ClientState,
    CoordinatorError,
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
from psyche.protocol.config import LLM, CoordinatorConfig, Model

__all__ = [
    "LLM",
    "Client",
    "ClientState",
    "Coordinator",
    "CoordinatorConfig",
    "CoordinatorError",
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
