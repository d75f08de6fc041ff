"""Warmup: load the epoch's model, tell the others, and report ready to the coordinator.

The model comes from the checkpoint the coordinator names, or from the previous epoch's clients
when the run's model lives with peers (P2P checkpoints, docs/protocol.md item 13). A loaded
client announces ``Finished(warmup)`` so its peers know, re-announces its model offer for
joiners, and sends its warmup witness once every member is ready or after
a grace (:func:`warmup_grace_s`: 20 s, or the time one copy of the model takes at 20 Mbit/s if
longer), so a member that never loads cannot hold the run until ``warmup_time``.
The step's result is the :class:`ModelKit` the training steps use.
"""

from __future__ import annotations

import asyncio
import logging

from psyche.checkpoint.p2p import ReceivedModel
from psyche.coordinator import Coordinator, Witness
from psyche.daemon.epoch import EpochView
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import ClientParts, healthy_index
from psyche.events import ModelLoadedEvent
from psyche.p2p.messages import Finished, sign_announcement
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.locations import P2PCheckpoint, P2PGcsCheckpoint
from psyche.training.hashing import model_hash

__all__ = ["WARMUP_GRACE_S", "WarmupStep", "warmup_grace_s"]

log = logging.getLogger("psyche.daemon")

WARMUP_GRACE_S = 20.0
"""How long a loaded client waits at least for every peer's ready signal before sending its
warmup witness anyway."""
GRACE_RATE_BPS = 2_500_000.0
"""The grace also covers one copy of the model at this rate (20 Mbit/s, a home uplink): a joiner
fetching the model from peers over home links must not be cut out by a grace made for tiny
models (a 204 MB model took longer than 20 s on the emulated internet, bench/internet.py)."""


def warmup_grace_s(model_bytes: int) -> float:
    """How long to wait for the slowest member's ready signal; ``warmup_time`` still bounds it."""
    return max(WARMUP_GRACE_S, model_bytes / GRACE_RATE_BPS)


def _model_bytes(kit: ModelKit) -> int:
    return sum(p.numel() * p.element_size() for p in kit.trainer.model.parameters())


class WarmupStep:
    def __init__(self, parts: ClientParts, epoch: EpochView) -> None:
        self.parts = parts
        self.epoch = epoch
        self.kit: ModelKit | None = None
        self._ready_since: float | None = None
        self._witness_sent = False
        self._grace_s = WARMUP_GRACE_S

    async def load(self, coord: Coordinator, kit: ModelKit | None) -> ModelKit:
        """The kit to train with: the one kept from an earlier epoch, or a freshly loaded one."""
        if self.kit is None:
            self.kit = kit if kit is not None else await self._load(coord)
            self.kit.follow_verification(coord.config.verification_percent)
        return self.kit

    async def _load(self, coord: Coordinator) -> ModelKit:
        parts = self.parts
        received: ReceivedModel | None = None
        if isinstance(coord.llm.checkpoint, P2PCheckpoint | P2PGcsCheckpoint):
            received = await parts.sharing.fetch(coord)
        kit = await asyncio.to_thread(parts.load, coord, received)
        digest = await asyncio.to_thread(model_hash, kit.trainer.model)
        if received is not None:
            log.info(
                "model of step %d fetched from %d peers in %.1f s",
                received.manifest.step,
                len(received.sources),
                received.seconds,
            )
        parts.events.write(
            ModelLoadedEvent(
                step=coord.progress.step,
                source="p2p" if received is not None else kit.source,
                peers=sorted(received.sources) if received is not None else [],
                seconds=round(received.seconds, 3) if received is not None else None,
                model_hash=digest,
            )
        )
        return kit

    async def poll(self, coord: Coordinator) -> None:
        """Ready signals and the warmup witness, once the model is loaded."""
        if self.kit is None:
            return
        parts, epoch = self.parts, self.epoch
        everyone = {c.id.p2p_identity for c in coord.epoch_state.clients}
        if not everyone <= epoch.ready:
            await parts.sharing.announce(coord.progress.step)
        if self._ready_since is None:
            self._ready_since = parts.clock()
            self._grace_s = warmup_grace_s(_model_bytes(self.kit))
            epoch.ready.add(parts.identity.p2p_identity)
            ready = Finished(step=0, warmup=True)
            await parts.transport.announce(sign_announcement(parts.key, ready))
        waited = parts.clock() - self._ready_since > self._grace_s
        if not self._witness_sent and (everyone <= epoch.ready or waited):
            i = healthy_index(parts, coord)
            if i is None:
                return
            self._witness_sent = True
            proof = WitnessProof(position=i, index=i, witness=False)
            await parts.backend.send_warmup_witness(Witness(proof, Bloom.empty(), Bloom.empty()))
