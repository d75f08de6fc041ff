"""Run configuration types: ``CoordinatorConfig`` and the ``Model`` description (SPEC §1.4, §1.5).

These are the reference's config shapes, so a reference ``state.toml`` loads unchanged (see
:mod:`psyche.protocol.runconfig`). Field order is the on-chain order. Every type is a frozen,
slotted dataclass; ``check()`` methods raise :class:`ConfigError` with a message that names the key
and the rule it breaks. Deviations from the reference (see docs/protocol.md):

* ``verification_percent`` must be 0: verification is not implemented (the reference accepted any
  value and then crashed the client when a verifier was drawn).
* Cosine LR is clamped to ``final_lr`` past ``total_steps`` (the reference rose again).
* Every number a client computes with is checked (finite learning rates ``>= 0``, a DisTrO
  ``compression_decay`` in [0, 1], ...) and data addresses must be well formed: the reference
  accepted such configs, after which every client failed at load, every epoch. The Rust program's
  ``Model::check`` applies the same rules (``tests/vectors/config/validity.json`` pins both).

Each component owns its rules (``check(path)`` on the LR schedule, optimizer, checkpoint and data
location variants); :meth:`LLM.check` runs them in a fixed order, the same order as the program.
:meth:`LLM.check_client_support` adds what only this client cannot do (Python entry points only).
"""

from __future__ import annotations

import enum
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, ClassVar

from psyche.protocol.serde import U8, U16, U32, U64, ConfigError, MaxBytes, Tagged

MAX_CLIENTS = 256
MAX_WITNESSES = 32
RUN_ID_MAX_LEN = 32

Str64 = Annotated[str, MaxBytes(64)]
Url = Annotated[str, MaxBytes(192)]


def _rule(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def as_f32(x: float) -> float:
    """``x`` rounded to the nearest f32, overflow giving ±inf: Rust's ``x as f32``, which is what
    the program stores for the optimizer's f32 fields."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def number_rule(
    path: str, value: float, what: str, ok: Callable[[float], bool], *, f32: bool = False
) -> None:
    """``value`` must be finite and satisfy ``ok``; for an f32 field its f32 rounding must too,
    so Python (which keeps the f64 of a centralized run) and the program (which stores the f32 of
    a Solana run) accept exactly the same values."""
    stored = as_f32(value) if f32 else value
    _rule(
        math.isfinite(value) and math.isfinite(stored) and ok(value) and ok(stored),
        f"{path} ({value!r}) must be {what}",
    )


def _at_least_0(x: float) -> bool:
    return x >= 0


def _above_0(x: float) -> bool:
    return x > 0


def _unit(x: float) -> bool:
    return 0 <= x <= 1


def _beta(x: float) -> bool:
    return 0 <= x < 1


_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[A-Za-z0-9:.%_-]*:[A-Za-z0-9:.%_-]*\]")


def server_address_ok(address: str) -> bool:
    """``host:port`` (IPv6 in brackets), port 1-65535: what the client's data connection parses,
    restricted to characters a host name or address can have."""
    host, sep, port = address.rpartition(":")
    return (
        bool(sep)
        and _HOST.fullmatch(host) is not None
        and port.isascii()
        and port.isdigit()
        and len(port.lstrip("0")) <= 5  # (int() of thousands of digits raises)
        and 0 < int(port.lstrip("0") or "0") < 65536
    )


def http_url_ok(url: str) -> bool:
    """``http://`` or ``https://``, a non-empty host part, no spaces or control characters."""
    for scheme in ("http://", "https://"):
        if url.startswith(scheme):
            rest = url[len(scheme) :]
            host = re.split(r"[/?#]", rest, maxsplit=1)[0]
            return bool(host) and not any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in url)
    return False


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

    def advisories(self) -> list[str]:
        """Valid but risky settings, for a warning (never an error): a witness quorum that one
        member can reach alone decides consensus and who is ejected; one that a single absent
        witness can miss ends the epoch."""
        if self.witness_nodes == 1:
            return [
                "config.witness_nodes = 1: the witness quorum is 1, so one witness alone decides "
                "each round's consensus and which trainers are ejected"
            ]
        if self.witness_nodes == 0:
            return [
                "config.witness_nodes = 0: every client witnesses and the quorum follows the "
                "number of witnesses that report, so one reporting witness can be the whole "
                "quorum (deciding consensus and ejections alone)"
            ]
        if self.witness_nodes == 2:
            return [
                "config.witness_nodes = 2: the quorum is 2 of 2, so one elected witness that "
                "never reports (offline, or a member that stays silent) fails the quorum and "
                "ends the epoch in every round it is elected, until a health check removes it; "
                "3 witnesses (quorum 2) tolerate one"
            ]
        return []

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

    LRS: ClassVar[tuple[str, ...]] = ()
    """The variant's learning-rate fields: each must be finite and >= 0."""
    STEPS: ClassVar[tuple[str, ...]] = ()
    """Step counts that must be at least 1 (a schedule over 0 steps is no schedule)."""

    def check(self, path: str = "model.LLM.lr_schedule") -> None:
        where = f"{path}.{self.TAG}"
        for name in self.LRS:
            number_rule(f"{where}.{name}", getattr(self, name), "a finite number >= 0", _at_least_0)
        for name in self.STEPS:
            _rule(getattr(self, name) >= 1, f"{where}.{name} must be at least 1")

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
    LRS = ("base_lr", "warmup_init_lr")
    base_lr: float
    warmup_steps: U32
    warmup_init_lr: float

    def get_lr(self, step: int) -> float:
        w = self._warmup(self.base_lr, self.warmup_init_lr, self.warmup_steps, step)
        return self.base_lr if w is None else w


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearLR(LearningRateSchedule):
    TAG = "Linear"
    LRS = ("base_lr", "warmup_init_lr", "final_lr")
    STEPS = ("total_steps",)
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
    LRS = ("base_lr", "warmup_init_lr", "final_lr")
    STEPS = ("total_steps",)
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
    LRS = ("base_lr", "warmup_init_lr", "cosine_decay_final_lr", "linear_decay_final_lr")
    base_lr: float
    warmup_init_lr: float
    cosine_decay_final_lr: float
    linear_decay_final_lr: float
    warmup_steps: U32
    stable_steps: U32
    cosine_decay_steps: U32
    linear_decay_steps: U32

    def check(self, path: str = "model.LLM.lr_schedule") -> None:
        LearningRateSchedule.check(self, path)
        _rule(
            self.linear_decay_final_lr <= self.cosine_decay_final_lr <= self.base_lr,
            f"{path}.WarmupStableDecay: need linear_decay_final_lr <= "
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

    def check(self, path: str = "model.LLM.optimizer") -> None:
        raise NotImplementedError


def check_clip_grad_norm(path: str, value: float | None) -> None:
    if value is not None:
        number_rule(
            path,
            value,
            "a finite number > 0 (leave it out to disable clipping)",
            _above_0,
            f32=True,
        )


def check_weight_decay(path: str, value: float | None) -> None:
    if value is not None:
        number_rule(path, value, "a finite number >= 0", _at_least_0, f32=True)


def check_compression_decay(path: str, value: float) -> None:
    number_rule(path, value, "a finite number in [0, 1]", _unit, f32=True)


@dataclass(frozen=True, slots=True)
class DummyOptimizer(OptimizerDefinition):
    TAG = "Dummy"

    def check(self, path: str = "model.LLM.optimizer") -> None:
        _rule(False, f"{path} must not be Dummy")


@dataclass(frozen=True, slots=True, kw_only=True)
class AdamWOptimizer(OptimizerDefinition):
    TAG = "AdamW"
    betas: tuple[float, float]
    weight_decay: float
    eps: float
    clip_grad_norm: float | None = None

    def check(self, path: str = "model.LLM.optimizer") -> None:
        where = f"{path}.AdamW"
        for i, beta in enumerate(self.betas):
            number_rule(f"{where}.betas[{i}]", beta, "a finite number in [0, 1)", _beta, f32=True)
        check_weight_decay(f"{where}.weight_decay", self.weight_decay)
        number_rule(f"{where}.eps", self.eps, "a finite number > 0", _above_0, f32=True)
        check_clip_grad_norm(f"{where}.clip_grad_norm", self.clip_grad_norm)


@dataclass(frozen=True, slots=True, kw_only=True)
class DistroOptimizer(OptimizerDefinition):
    TAG = "Distro"
    clip_grad_norm: float | None = None
    """Global L2 gradient clipping before compression; None disables it (if set: finite, > 0)."""
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

    def check(self, path: str = "model.LLM.optimizer") -> None:
        where = f"{path}.Distro"
        _rule(self.compression_chunk > 0, f"{where}.compression_chunk must be > 0")
        _rule(self.compression_topk > 0, f"{where}.compression_topk must be > 0")
        check_compression_decay(f"{where}.compression_decay", self.compression_decay)
        check_clip_grad_norm(f"{where}.clip_grad_norm", self.clip_grad_norm)
        check_weight_decay(f"{where}.weight_decay", self.weight_decay)


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

    def check(self, path: str = "model.LLM.checkpoint") -> None:
        _rule(
            not isinstance(self, EphemeralCheckpoint),
            f"{path} must not be Ephemeral (clients need a model to start from)",
        )
        repo = getattr(self, "repo", None)
        if isinstance(self, HubCheckpoint | P2PCheckpoint):
            assert isinstance(repo, HubRepo)
            _rule(repo.repo_id != "", f"{path}.{self.TAG}.repo_id must not be empty")
        if isinstance(self, GcsCheckpoint | P2PGcsCheckpoint):
            assert isinstance(repo, GcsRepo)
            _rule(repo.bucket != "", f"{path}.{self.TAG}.bucket must not be empty")


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

    def check(self, path: str = "model.LLM.data_location.Http.location") -> None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class SingleUrl(HttpLocation):
    TAG = "SingleUrl"
    NEWTYPE = True
    url: Url

    def check(self, path: str = "model.LLM.data_location.Http.location") -> None:
        _rule(self.url != "", f"{path} must not be empty")
        _rule(
            http_url_ok(self.url),
            f"{path}.SingleUrl ({self.url!r}) must be an http:// or https:// URL",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NumberedFiles(HttpLocation):
    TAG = "NumberedFiles"
    url_template: Str64
    start_index: U32
    n_left_pad_zeros: U8
    num_files: U32

    def check(self, path: str = "model.LLM.data_location.Http.location") -> None:
        where = f"{path}.NumberedFiles"
        t = self.url_template
        _rule(
            http_url_ok(t) and t.count("{}") == 1,
            f"{where}.url_template ({t!r}) must be an http:// or https:// URL with one {{}} "
            "(where the file number goes)",
        )
        _rule(self.num_files >= 1, f"{where}.num_files must be at least 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class Gcp(HttpLocation):
    TAG = "Gcp"
    bucket_name: Str64
    filter_directory: Url = ""

    def check(self, path: str = "model.LLM.data_location.Http.location") -> None:
        _rule(
            re.fullmatch(r"[a-z0-9._-]+", self.bucket_name) is not None,
            f"{path}.Gcp.bucket_name ({self.bucket_name!r}) must be a GCS bucket name "
            "(lowercase letters, digits, '.', '_', '-')",
        )


class DataLocation(Tagged):
    """Where clients get training tokens (``[model.LLM.data_location]``)."""

    def check(self, path: str = "model.LLM.data_location") -> None:
        # Newtype variants hold one string (address, path or URL): never empty.
        for name in ("address", "path", "url"):
            value = getattr(self, name, None)
            if isinstance(value, str):
                _rule(value != "", f"{path}.{self.TAG} must not be empty")


@dataclass(frozen=True, slots=True)
class DummyData(DataLocation):
    TAG = "Dummy"


@dataclass(frozen=True, slots=True)
class ServerData(DataLocation):
    TAG = "Server"
    NEWTYPE = True
    address: Str64

    def check(self, path: str = "model.LLM.data_location") -> None:
        DataLocation.check(self, path)
        _rule(
            server_address_ok(self.address),
            f"{path}.Server ({self.address!r}) must be host:port with a port in 1-65535 "
            "(an IPv6 address in brackets)",
        )


@dataclass(frozen=True, slots=True)
class LocalData(DataLocation):
    TAG = "Local"
    NEWTYPE = True
    path: Url

    def check(self, path: str = "model.LLM.data_location") -> None:
        DataLocation.check(self, path)
        _rule("\0" not in self.path, f"{path}.Local must not contain a NUL character")


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpData(DataLocation):
    TAG = "Http"
    location: HttpLocation
    token_size_in_bytes: TokenSize
    shuffle: Shuffle

    def check(self, path: str = "model.LLM.data_location") -> None:
        self.location.check(f"{path}.Http.location")


@dataclass(frozen=True, slots=True)
class WeightedHttpData(DataLocation):
    TAG = "WeightedHttp"
    NEWTYPE = True
    url: Url

    def check(self, path: str = "model.LLM.data_location") -> None:
        DataLocation.check(self, path)
        _rule(
            http_url_ok(self.url),
            f"{path}.WeightedHttp ({self.url!r}) must be an http:// or https:// URL",
        )


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
        """The model's rules, component by component, in the program's order (``Model::check``:
        the first broken rule is reported)."""
        _rule(self.max_seq_len > 0, "model.LLM.max_seq_len must be greater than 0")
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
        _rule(
            isinstance(opt, DistroOptimizer),
            f"model.LLM.optimizer.{opt.TAG} is not supported by this client: multi-client runs "
            "need Distro",
        )
        _rule(
            self.architecture is not LLMArchitecture.Torchtitan,
            f"model.LLM.architecture ({self.architecture.name}) is not supported by this client "
            "(use HfLlama, HfDeepseek or HfAuto)",
        )
        loc = self.data_location
        _rule(
            isinstance(loc, ServerData | LocalData | HttpData | DummyData),
            f"model.LLM.data_location.{loc.TAG} is not supported by this client "
            "(use Server, Local, Http or Dummy)",
        )
        ck = self.checkpoint
        _rule(
            isinstance(ck, HubCheckpoint | P2PCheckpoint),
            f"model.LLM.checkpoint.{ck.TAG} is not supported by this client (use Hub; the run "
            "turns it into P2P itself)",
        )

    def check_cold_start_warmup_steps(self, config: CoordinatorConfig) -> None:
        """cold_start_warmup_steps must fit in one epoch's rounds."""
        limit = (config.epoch_time - config.warmup_time) // config.max_round_train_time
        _rule(
            self.cold_start_warmup_steps <= limit,
            f"model.LLM.cold_start_warmup_steps ({self.cold_start_warmup_steps}) must be at most "
            f"(config.epoch_time - config.warmup_time) / config.max_round_train_time ({limit})",
        )
