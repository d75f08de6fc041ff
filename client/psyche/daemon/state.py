"""What the daemon holds: the trained model with its files, the per-epoch view, and the seam
through which it learns peers' P2P addresses. Plain data, shared by :mod:`.client` and
:mod:`.runner`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from psyche.daemon.rounds import RoundState
from psyche.data.provider import DataProvider
from psyche.distro import PayloadSpec
from psyche.protocol.identity import NodeIdentity
from psyche.training.trainer import Trainer

__all__ = ["EpochView", "PeerDirectory", "Trained"]


class PeerDirectory(Protocol):
    """Where the daemon learns the P2P addresses of other clients (the coordinator only knows
    their keys). The centralized backend relays them; a Solana run would use a rendezvous."""

    async def publish_p2p_addrs(self, addrs: list[str]) -> None: ...

    def peer_addrs(self) -> dict[bytes, list[str]]: ...


@dataclass
class Trained:
    """What this client needs to train: built once per process, kept across epochs."""

    trainer: Trainer
    spec: PayloadSpec
    data: DataProvider
    files: dict[str, bytes] = field(default_factory=dict)
    """``config.json`` and tokenizer files exactly as the model came (served and checkpointed
    with it, so every copy of a run's model has byte-identical files)."""
    source: str = "checkpoint"


@dataclass
class EpochView:
    """Everything this client holds for the current epoch; dropped at the epoch's end."""

    epoch: int
    rounds: dict[int, RoundState] = field(default_factory=dict)
    ready: set[bytes] = field(default_factory=set)
    loaded: bool = False
    sent_ready: bool = False
    sent_warmup_witness: bool = False
    ready_since: float = 0.0
    dropped: bool = False
    cooldown_done: bool = False
    stragglers: set[NodeIdentity] = field(default_factory=set)
    """Members that had not announced Finished when a round of this epoch hit its train timeout.
    Rounds are not held open for them (nor for their results) until they announce Finished
    again, so a member that went silent costs one timed-out round, not one per round until a
    health check removes it. The protocol's own limit (``max_round_train_time``) already cut
    them off once, so an alive but slow member loses nothing the timeout had not taken."""
