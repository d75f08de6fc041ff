"""What this client trains with and what it measured: shared by the round engine's steps and
the eval runner, which must not depend on the client's other parts (:mod:`.parts`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from psyche.checkpoint.p2p import ReceivedModel
from psyche.coordinator import Coordinator
from psyche.data.provider import DataProvider
from psyche.distro import Distro
from psyche.distro.result_format import DistroFormat, ResultFormat
from psyche.training.sparseloco_trainer import OPTIMIZER_STATE_FILE, SparseLoCoTrainer
from psyche.training.trainer import Trainer

__all__ = ["ClientStats", "ModelKit", "ModelLoader"]


@dataclass
class ModelKit:
    """What this client trains with: built once per process (at its first warmup), kept across
    epochs, and dropped when the client drops out (its weights may then miss applies)."""

    trainer: Trainer | SparseLoCoTrainer
    """DisTrO's (the default) or SparseLoCo's, after the run config's optimizer."""
    format: ResultFormat
    """The run's result wire format: download bound, strict decoder, copy-check fingerprint."""
    data: DataProvider
    files: dict[str, bytes] = field(default_factory=dict)
    """``config.json`` and tokenizer files exactly as the model came (served and checkpointed
    with it, so every copy of a run's model has byte-identical files)."""
    source: str = "checkpoint"

    def follow_verification(self, verification_percent: int) -> None:
        """Take per-sample commitments (a DisTrO trainer, on one device or several; a
        SparseLoCo trainer commits to its inner states) exactly when the run
        verifies: a kit kept across epochs must follow a config changed in between, or its
        payloads and its decoder would disagree with a client loaded since
        (docs/protocol.md, "Free riders: per-sample commitments")."""
        trainer = self.trainer
        commit = verification_percent > 0
        if isinstance(trainer, SparseLoCoTrainer):
            # SparseLoCo commits to its chain of inner states instead (docs/protocol.md,
            # "SparseLoCo: the inner-step audit").
            if trainer.audit != commit:
                trainer.set_audit(commit)
            self.format = trainer.format
            return
        if not isinstance(trainer, Trainer) or not isinstance(self.format, DistroFormat):
            return
        distro = trainer.distro
        if not isinstance(distro, Distro) or self.format.spec.commitments == commit:
            return
        distro.commitments = commit
        trainer.commit_samples = trainer.verifiable_lookahead = commit
        self.format = DistroFormat(distro.payload_spec)

    def shared_files(self) -> dict[str, bytes]:
        """:attr:`files` plus the optimizer's run-global state as it is now (SparseLoCo's outer
        momentum), for a checkpoint or the model served to joiners."""
        out = {k: v for k, v in self.files.items() if k != OPTIMIZER_STATE_FILE}
        if isinstance(self.trainer, SparseLoCoTrainer):
            state = self.trainer.state_file()
            if state is not None:
                out[OPTIMIZER_STATE_FILE] = state
        return out


@dataclass
class ClientStats:
    """What this client measured lately, reported in its witness metadata."""

    loss: float = 0.0
    tokens_per_sec: float = 0.0
    evals: dict[int, Any] = field(default_factory=dict)
    """Task index → the latest :class:`psyche.evals.EvalScore` of that task."""


ModelLoader = Callable[[Coordinator, ReceivedModel | None], ModelKit]
"""Builds the kit from the coordinator's model description, or from a model fetched from
peers; blocking (runs in a worker thread)."""
