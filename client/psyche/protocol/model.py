"""The model a run trains: ``Model`` (``[model.<Variant>]``, only ``LLM``).

:meth:`LLM.check` runs its components' rules (data location, checkpoint, optimizer, LR schedule)
in the program's order (``Model::check``), so the first broken rule is the one both report;
``tests/vectors/config/validity.json`` pins both sides. :meth:`LLM.check_client_support` adds what
only this client cannot do (Python entry points only).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from psyche.protocol.config_rules import rule
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.locations import (
    Checkpoint,
    DataLocation,
    DummyData,
    GcsCheckpoint,
    HttpData,
    HubCheckpoint,
    LocalData,
    P2PCheckpoint,
    P2PGcsCheckpoint,
    PreprocessedData,
    ServerData,
    WeightedHttpData,
)
from psyche.protocol.lr_schedules import LearningRateSchedule
from psyche.protocol.optimizers import DistroOptimizer, OptimizerDefinition, SparseLoCoOptimizer
from psyche.protocol.strict_obj import U32, Tagged


class LLMArchitecture(enum.Enum):
    HfLlama = "HfLlama"
    HfDeepseek = "HfDeepseek"
    HfAuto = "HfAuto"
    Torchtitan = "Torchtitan"


class LLMDataType(enum.Enum):
    Pretraining = "Pretraining"
    Finetuning = "Finetuning"


class Model(Tagged):
    """``[model.<Variant>]``; the only variant is ``LLM``."""

    def check(self) -> None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class LLM(Model):
    TAG = "LLM"
    max_seq_len: U32
    """Tokens per sample."""
    cold_start_warmup_steps: U32
    """Steps of LR ramp after a cold start (resume from pause)."""
    architecture: LLMArchitecture
    checkpoint: Checkpoint
    data_type: LLMDataType
    data_location: DataLocation
    lr_schedule: LearningRateSchedule
    optimizer: OptimizerDefinition

    def check(self) -> None:
        """The model's rules, component by component, in the program's order (``Model::check``:
        the first broken rule is reported)."""
        rule(self.max_seq_len > 0, "model.LLM.max_seq_len must be greater than 0")
        self.data_location.check("model.LLM.data_location")
        self.checkpoint.check("model.LLM.checkpoint")
        self.optimizer.check("model.LLM.optimizer")
        self.lr_schedule.check("model.LLM.lr_schedule")

    def check_client_support(self) -> None:
        """What every client of this package would fail to load, although the protocol (and so
        the program) allows it. Checked by the Python entry points (validate-config, the server,
        update-config) after :meth:`check`; the program stays client-neutral, so a client that
        learns a new variant needs no program upgrade."""
        opt = self.optimizer
        rule(
            isinstance(opt, DistroOptimizer | SparseLoCoOptimizer),
            f"model.LLM.optimizer.{opt.TAG} is not supported by this client: multi-client runs "
            "need Distro or SparseLoCo",
        )
        rule(
            self.architecture is not LLMArchitecture.Torchtitan,
            f"model.LLM.architecture ({self.architecture.name}) is not supported by this client "
            "(use HfLlama, HfDeepseek or HfAuto)",
        )
        loc = self.data_location
        rule(
            isinstance(
                loc,
                ServerData | LocalData | HttpData | WeightedHttpData | PreprocessedData | DummyData,
            ),
            f"model.LLM.data_location.{loc.TAG} is not supported by this client "
            "(use Server, Local, Http, WeightedHttp, Preprocessed or Dummy)",
        )
        ck = self.checkpoint
        rule(
            isinstance(ck, HubCheckpoint | P2PCheckpoint | GcsCheckpoint | P2PGcsCheckpoint),
            f"model.LLM.checkpoint.{ck.TAG} is not supported by this client (use Hub or Gcs; "
            "the run turns it into P2P or P2PGcs itself)",
        )

    def check_cold_start_warmup_steps(self, config: CoordinatorConfig) -> None:
        """cold_start_warmup_steps must fit in one epoch's rounds."""
        limit = (config.epoch_time - config.warmup_time) // config.max_round_train_time
        rule(
            self.cold_start_warmup_steps <= limit,
            f"model.LLM.cold_start_warmup_steps ({self.cold_start_warmup_steps}) must be at most "
            f"(config.epoch_time - config.warmup_time) / config.max_round_train_time ({limit})",
        )
