"""Run configuration types: ``CoordinatorConfig`` and the ``Model`` description (SPEC §1.4, §1.5).

These are the reference's config shapes, so a reference ``state.toml`` loads unchanged (see
:mod:`psyche.protocol.runconfig`). Field order is the on-chain order. Every type is a frozen,
slotted dataclass; ``check()`` methods raise :class:`ConfigError` with a message that names the key
and the rule it breaks. Deviations from the reference (see docs/protocol.md):

* ``verification_percent`` must be 0: verification is not implemented (the reference accepted any
  value and then crashed the client when a verifier was drawn).
* Cosine LR is clamped to ``final_lr`` past ``total_steps`` (the reference rose again).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Annotated

from psyche.protocol.serde import U8, U16, U32, U64, ConfigError, MaxBytes, Tagged

MAX_CLIENTS = 256
MAX_WITNESSES = 32
RUN_ID_MAX_LEN = 32

Str64 = Annotated[str, MaxBytes(64)]
Url = Annotated[str, MaxBytes(192)]


def _rule(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorConfig:
    """Timing, membership and batch-size rules of a run (``[config]`` in state.toml)."""

    warmup_time: U64
    """Maximum seconds in Warmup (clients load the model); training starts earlier once enough
    warmup witnesses arrived."""
    cooldown_time: U64
    """Maximum seconds in Cooldown; the first accepted checkpoint from an elected checkpointer ends
    it earlier."""
    max_round_train_time: U64
    """RoundTrain timeout in seconds; a witness quorum ends the round earlier."""
    round_witness_time: U64
    """Seconds spent in RoundWitness (always waited in full)."""
    global_batch_size_warmup_tokens: U64
    """Tokens over which the batch size ramps from start to end (0: always end)."""
    epoch_time: U64
    """Seconds after which an epoch winds down (two drain rounds, then Cooldown)."""
    total_steps: U32
    """The run finishes when the step counter reaches this."""
    init_min_clients: U16
    """Pending clients needed to leave WaitingForMembers."""
    min_clients: U16
    """Below this many healthy clients the epoch ends."""
    witness_nodes: U16
    """Witnesses elected per round; 0 means min(#clients, 32)."""
    global_batch_size_start: U16
    """Samples per step at the start of the ramp."""
    global_batch_size_end: U16
    """Samples per step after the ramp."""
    verification_percent: U8 = 0
    """Share of nodes that would verify instead of train; must be 0 (not implemented)."""
    waiting_for_members_extra_time: U8 = 3
    """Grace seconds in WaitingForMembers before Warmup (defaults to 3 when omitted, as some
    reference configs omit it)."""

    def check(self) -> None:
        """Validate in the reference's order, naming the key and the rule."""
        c = self
        _rule(c.epoch_time > 0, "config.epoch_time must be greater than 0")
        _rule(
            c.warmup_time < c.epoch_time,
            f"config.warmup_time ({c.warmup_time}) must be less than "
            f"config.epoch_time ({c.epoch_time})",
        )
        _rule(c.max_round_train_time > 0, "config.max_round_train_time must be greater than 0")
        _rule(
            c.max_round_train_time < c.epoch_time,
            f"config.max_round_train_time ({c.max_round_train_time}) must be less than "
            f"config.epoch_time ({c.epoch_time})",
        )
        _rule(c.round_witness_time > 0, "config.round_witness_time must be greater than 0")
        _rule(c.min_clients > 0, "config.min_clients must be greater than 0")
        _rule(
            c.init_min_clients >= c.min_clients,
            f"config.init_min_clients ({c.init_min_clients}) must be at least "
            f"config.min_clients ({c.min_clients})",
        )
        _rule(
            c.init_min_clients <= MAX_CLIENTS,
            f"config.init_min_clients ({c.init_min_clients}) must be at most {MAX_CLIENTS}",
        )
        _rule(
            c.global_batch_size_start > 0, "config.global_batch_size_start must be greater than 0"
        )
        _rule(c.global_batch_size_end > 0, "config.global_batch_size_end must be greater than 0")
        _rule(
            c.global_batch_size_end >= c.global_batch_size_start,
            f"config.global_batch_size_end ({c.global_batch_size_end}) must be at least "
            f"config.global_batch_size_start ({c.global_batch_size_start})",
        )
        _rule(c.total_steps > 0, "config.total_steps must be greater than 0")
        _rule(
            c.witness_nodes <= c.min_clients,
            f"config.witness_nodes ({c.witness_nodes}) must be at most "
            f"config.min_clients ({c.min_clients})",
        )
        _rule(
            c.witness_nodes <= MAX_WITNESSES,
            f"config.witness_nodes ({c.witness_nodes}) must be at most {MAX_WITNESSES}",
        )
        _rule(c.cooldown_time > 0, "config.cooldown_time must be greater than 0")
        _rule(
            c.waiting_for_members_extra_time > 0,
            "config.waiting_for_members_extra_time must be greater than 0",
        )
        _rule(
            c.verification_percent == 0,
            f"config.verification_percent ({c.verification_percent}) must be 0: "
            "verification is not implemented",
        )

    def get_batch_size(self, tokens: int) -> int:
        """Samples per step after ``tokens`` tokens (linear ramp, rounding half away from 0)."""
        start, end, warm = (
            self.global_batch_size_start,
            self.global_batch_size_end,
            self.global_batch_size_warmup_tokens,
        )
        if tokens >= warm:
            return end
        x = start + (end - start) * (tokens / warm)
        return math.floor(x + 0.5)

    def witness_count(self, n_clients: int) -> int:
        """Witnesses per round for ``n_clients`` epoch clients."""
        return self.witness_nodes if self.witness_nodes else min(n_clients, MAX_WITNESSES)

    def quorum(self, n: int) -> int:
        """Witness quorum (SPEC §2.3): W ≤ 3 → {1, 2, 2}; otherwise max(1, ⌊2W/3⌋)."""
        w = self.witness_nodes if self.witness_nodes else n
        if w <= 1:
            return 1
        if w <= 3:
            return 2
        return max(1, w * 2 // 3)


# --- LR schedules -------------------------------------------------------------------------------


class LearningRateSchedule(Tagged):
    """``[model.LLM.lr_schedule.<Variant>]``; all variants ramp linearly during warmup."""

    def get_lr(self, step: int) -> float:
        raise NotImplementedError

    @staticmethod
    def _warmup(base: float, init: float, warmup_steps: int, step: int) -> float | None:
        if step < warmup_steps:
            return init + (base - init) * step / warmup_steps
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstantLR(LearningRateSchedule):
    TAG = "Constant"
    base_lr: float
    warmup_steps: U32
    warmup_init_lr: float

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        return self.base_lr if w is None else w


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearLR(LearningRateSchedule):
    TAG = "Linear"
    base_lr: float
    warmup_steps: U32
    warmup_init_lr: float
    total_steps: U32
    final_lr: float

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        if w is not None:
            return w
        if step >= self.total_steps or self.total_steps <= self.warmup_steps:
            return self.final_lr
        p = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.base_lr + (self.final_lr - self.base_lr) * p


@dataclass(frozen=True, slots=True, kw_only=True)
class CosineLR(LearningRateSchedule):
    TAG = "Cosine"
    base_lr: float
    warmup_steps: U32
    warmup_init_lr: float
    total_steps: U32
    final_lr: float

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        if w is not None:
            return w
        # Clamped (our fix): past total_steps the reference's unclamped cosine rose again.
        if step >= self.total_steps or self.total_steps <= self.warmup_steps:
            return self.final_lr
        p = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.final_lr + (self.base_lr - self.final_lr) * 0.5 * (1 + math.cos(math.pi * p))


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmupStableDecayLR(LearningRateSchedule):
    TAG = "WarmupStableDecay"
    base_lr: float
    warmup_init_lr: float
    cosine_decay_final_lr: float
    linear_decay_final_lr: float
    warmup_steps: U32
    stable_steps: U32
    cosine_decay_steps: U32
    linear_decay_steps: U32

    def check(self) -> None:
        _rule(
            self.linear_decay_final_lr <= self.cosine_decay_final_lr <= self.base_lr,
            "model.LLM.lr_schedule.WarmupStableDecay: need linear_decay_final_lr <= "
            "cosine_decay_final_lr <= base_lr",
        )

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        if w is not None:
            return w
        s = step - self.warmup_steps
        if s < self.stable_steps:
            return self.base_lr
        s -= self.stable_steps
        if s < self.cosine_decay_steps:
            p = s / self.cosine_decay_steps
            lo, hi = self.cosine_decay_final_lr, self.base_lr
            return lo + (hi - lo) * 0.5 * (1 + math.cos(math.pi * p))
        s -= self.cosine_decay_steps
        if s < self.linear_decay_steps:
            p = s / self.linear_decay_steps
            return (
                self.cosine_decay_final_lr
                + (self.linear_decay_final_lr - self.cosine_decay_final_lr) * p
            )
        return self.linear_decay_final_lr


# --- Optimizers ---------------------------------------------------------------------------------


class OptimizerDefinition(Tagged):
    """``[model.LLM.optimizer.<Variant>]``. Only DisTrO is meaningful for multi-client runs."""


@dataclass(frozen=True, slots=True)
class DummyOptimizer(OptimizerDefinition):
    TAG = "Dummy"


@dataclass(frozen=True, slots=True, kw_only=True)
class AdamWOptimizer(OptimizerDefinition):
    TAG = "AdamW"
    betas: tuple[float, float]
    weight_decay: float
    eps: float
    clip_grad_norm: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DistroOptimizer(OptimizerDefinition):
    TAG = "Distro"
    clip_grad_norm: float | None = None
    """Global L2 gradient clipping before compression; None or <= 0 disables it."""
    weight_decay: float | None = None
    """Decoupled weight decay applied by each trainer; None means 0."""
    compression_decay: float
    """Residual decay β applied each step before the new gradient is added."""
    compression_topk: U16
    """DCT coefficients kept per chunk."""
    compression_chunk: U16
    """Target DCT tile edge (real edge: largest divisor of the dimension ≤ this)."""
    quantize_1bit: bool
    """Send only the sign of each kept coefficient."""


# --- Checkpoints --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HubRepo:
    repo_id: Str64
    revision: Str64 | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GcsRepo:
    bucket: Str64
    prefix: Str64 | None = None


class Checkpoint(Tagged):
    """Where joining clients get the model (``[model.LLM.checkpoint.<Variant>]``)."""


@dataclass(frozen=True, slots=True)
class EphemeralCheckpoint(Checkpoint):
    TAG = "Ephemeral"


@dataclass(frozen=True, slots=True)
class DummyCheckpoint(Checkpoint):
    TAG = "Dummy"
    NEWTYPE = True
    repo: HubRepo


@dataclass(frozen=True, slots=True)
class HubCheckpoint(Checkpoint):
    TAG = "Hub"
    NEWTYPE = True
    repo: HubRepo


@dataclass(frozen=True, slots=True)
class P2PCheckpoint(Checkpoint):
    TAG = "P2P"
    NEWTYPE = True
    repo: HubRepo


@dataclass(frozen=True, slots=True)
class GcsCheckpoint(Checkpoint):
    TAG = "Gcs"
    NEWTYPE = True
    repo: GcsRepo


@dataclass(frozen=True, slots=True)
class P2PGcsCheckpoint(Checkpoint):
    TAG = "P2PGcs"
    NEWTYPE = True
    repo: GcsRepo


# --- Data locations -----------------------------------------------------------------------------


class TokenSize(enum.Enum):
    TwoBytes = 2
    FourBytes = 4


class Shuffle(Tagged):
    """Sample order of HTTP/local token data."""


@dataclass(frozen=True, slots=True)
class DontShuffle(Shuffle):
    TAG = "DontShuffle"


@dataclass(frozen=True, slots=True)
class SeededShuffle(Shuffle):
    TAG = "Seeded"
    NEWTYPE = True
    seed: tuple[U8, ...]

    def __post_init__(self) -> None:
        _rule(len(self.seed) == 32, "shuffle Seeded needs exactly 32 bytes")


class HttpLocation(Tagged):
    """Which HTTP files hold the tokens."""


@dataclass(frozen=True, slots=True)
class SingleUrl(HttpLocation):
    TAG = "SingleUrl"
    NEWTYPE = True
    url: Url


@dataclass(frozen=True, slots=True, kw_only=True)
class NumberedFiles(HttpLocation):
    TAG = "NumberedFiles"
    url_template: Str64
    start_index: U32
    n_left_pad_zeros: U8
    num_files: U32


@dataclass(frozen=True, slots=True, kw_only=True)
class Gcp(HttpLocation):
    TAG = "Gcp"
    bucket_name: Str64
    filter_directory: Url = ""


class DataLocation(Tagged):
    """Where clients get training tokens (``[model.LLM.data_location]``)."""


@dataclass(frozen=True, slots=True)
class DummyData(DataLocation):
    TAG = "Dummy"


@dataclass(frozen=True, slots=True)
class ServerData(DataLocation):
    TAG = "Server"
    NEWTYPE = True
    address: Str64


@dataclass(frozen=True, slots=True)
class LocalData(DataLocation):
    TAG = "Local"
    NEWTYPE = True
    path: Url


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpData(DataLocation):
    TAG = "Http"
    location: HttpLocation
    token_size_in_bytes: TokenSize
    shuffle: Shuffle


@dataclass(frozen=True, slots=True)
class WeightedHttpData(DataLocation):
    TAG = "WeightedHttp"
    NEWTYPE = True
    url: Url


@dataclass(frozen=True, slots=True)
class PreprocessedData(DataLocation):
    TAG = "Preprocessed"
    NEWTYPE = True
    path: Url


# --- Model --------------------------------------------------------------------------------------


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
        _rule(self.max_seq_len > 0, "model.LLM.max_seq_len must be greater than 0")
        loc = self.data_location
        for value, key in (
            (getattr(loc, "address", None), "Server"),
            (getattr(loc, "path", None), type(loc).TAG),
            (getattr(loc, "url", None), type(loc).TAG),
        ):
            _rule(value != "", f"model.LLM.data_location.{key} must not be empty")
        if isinstance(loc, HttpData) and isinstance(loc.location, SingleUrl):
            _rule(loc.location.url != "", "model.LLM.data_location.Http.location must not be empty")
        ck = self.checkpoint
        _rule(
            not isinstance(ck, EphemeralCheckpoint),
            "model.LLM.checkpoint must not be Ephemeral (clients need a model to start from)",
        )
        if isinstance(ck, HubCheckpoint | P2PCheckpoint):
            _rule(ck.repo.repo_id != "", f"model.LLM.checkpoint.{ck.TAG}.repo_id must not be empty")
        if isinstance(ck, GcsCheckpoint | P2PGcsCheckpoint):
            _rule(ck.repo.bucket != "", f"model.LLM.checkpoint.{ck.TAG}.bucket must not be empty")
        _rule(
            not isinstance(self.optimizer, DummyOptimizer),
            "model.LLM.optimizer must not be Dummy",
        )
        if isinstance(self.optimizer, DistroOptimizer):
            o = self.optimizer
            _rule(
                o.compression_chunk > 0, "model.LLM.optimizer.Distro.compression_chunk must be > 0"
            )
            _rule(o.compression_topk > 0, "model.LLM.optimizer.Distro.compression_topk must be > 0")
        if isinstance(self.lr_schedule, WarmupStableDecayLR):
            self.lr_schedule.check()

    def check_cold_start_warmup_steps(self, config: CoordinatorConfig) -> None:
        """cold_start_warmup_steps must fit in one epoch's rounds."""
        limit = (config.epoch_time - config.warmup_time) // config.max_round_train_time
        _rule(
            self.cold_start_warmup_steps <= limit,
            f"model.LLM.cold_start_warmup_steps ({self.cold_start_warmup_steps}) must be at most "
            f"(config.epoch_time - config.warmup_time) / config.max_round_train_time ({limit})",
        )
