"""Cooldown: serve the epoch's final weights to joiners, save them (every client with
``--checkpoint-dir``; the elected checkpointers also upload and report them) and run the evals.

Started from the epoch's last training step, whose training must be over first (the weights
served must be the ones every client holds). Also run, as :func:`missed_cooldown`, when the
epoch ended without this client seeing its Cooldown (states coalesced): its weights have not
changed since the epoch's last round, so they are served all the same.
"""

from __future__ import annotations

import asyncio

from psyche.checkpoint.local import state_tensors
from psyche.coordinator import Coordinator
from psyche.daemon.checkpointing import gcs_repo
from psyche.daemon.epoch import EpochView
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import ClientParts, healthy_index
from psyche.daemon.training import TrainingStep
from psyche.training.hashing import model_hash

__all__ = ["CooldownStep", "missed_cooldown"]


class CooldownStep:
    def __init__(
        self, parts: ClientParts, epoch: EpochView, kit: ModelKit, last: TrainingStep | None
    ) -> None:
        self.parts = parts
        self.epoch = epoch
        self.kit = kit
        self.last = last

    async def run(self, coord: Coordinator) -> None:
        self.epoch.cooldown_done = True
        if self.last is not None:
            await self.last.stop()
        i = healthy_index(self.parts, coord)
        if i is None:
            return
        model = self.kit.trainer.model
        files = self.kit.shared_files()
        await self.parts.sharing.snapshot(model, files, coord.progress.step)
        if self.parts.evals is not None:
            self.parts.evals.start(self.kit, coord.progress.step)
        checkpointer = self.parts.checkpointer
        if not checkpointer.enabled:
            return
        elected = i in coord.checkpointer_indices()
        tensors = await asyncio.to_thread(state_tensors, model)
        digest = await asyncio.to_thread(model_hash, model)
        checkpointer.start(
            run_id=coord.run_id,
            step=coord.progress.step - 1,
            epoch=coord.progress.epoch,
            index=i if elected else None,
            tensors=tensors,
            files=files,
            model_hash=digest,
            gcs=gcs_repo(coord.llm.checkpoint),
        )


async def missed_cooldown(
    parts: ClientParts,
    coord: Coordinator,
    epoch: EpochView | None,
    kit: ModelKit | None,
    last: TrainingStep | None,
) -> None:
    if epoch is None or epoch.dropped or epoch.cooldown_done or not epoch.rounds or kit is None:
        return
    epoch.cooldown_done = True
    if last is not None:
        await last.wait()
    await parts.sharing.snapshot(kit.trainer.model, kit.shared_files(), coord.progress.step)
