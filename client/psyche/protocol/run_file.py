"""Loading run-config files: ``state.toml`` and ``data.toml``.

See docs/protocol.md, "Run-config files".

``state.toml`` is the serde form of the reference's Coordinator: top-level ``run_id`` and
``run_state``, a ``[config]`` table and ``[model.LLM…]`` tables; ``progress`` and ``epoch_state``
are optional and default. ``update-config`` style files (the Solana tests' ``config.toml``)
carry only ``[config]`` and ``[model]``; :func:`load_run_config` accepts both (``run_id`` optional
there).

A user must be able to bring a reference config unchanged, so two later reference layouts are also
accepted: a ``[model_extra_data]`` table (merged into ``[model.LLM]``) and the keys
``round_apply_time`` / ``checkpoint_source``, which do not exist in this protocol and are dropped
with a warning. Older reference configs (the user documentation's sample) are accepted too
(:func:`_older_keys`): ``config.rounds_per_epoch`` becomes ``config.epoch_time`` and an absent
``model.LLM.cold_start_warmup_steps`` is 0 (docs/protocol.md, "Older config keys"). Everything
else unknown is an error naming the key.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psyche.protocol.coordinator_config import RUN_ID_MAX_LEN, CoordinatorConfig
from psyche.protocol.locations import TokenSize
from psyche.protocol.model import LLM, Model
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.protocol.strict_obj import U8, U32, ConfigError, from_obj

RUN_STATE = "WaitingForMembers"
"""The only ``run_state`` a run-config file may name: every run starts there (the other states are
reached by the coordinator, never loaded), and the server refuses anything else."""
IGNORED_KEYS = {"config": ("round_apply_time",), "model.LLM": ("checkpoint_source",)}
DRAIN_ROUNDS = 2
"""Rounds at the end of every epoch that apply earlier results instead of training (item 6 of
docs/protocol.md's differences)."""

PUBLIC_RUN_VERIFICATION_PERCENT = 50
"""The ``verification_percent`` suggested for a public run: at 50 each client spends about 7-10 %
of its training compute recomputing others' results (with every verifier of a result on one
sub-batch: bench/README.md, "One sub-batch for every verifier"), and a DisTrO free rider on half
its batch is ejected within 10 rounds with probability 0.93-0.94 (0.70-0.74 at 25)."""
SPARSELOCO_VERIFICATION_PERCENT = 25
"""The same for a SparseLoCo run: every audit replays one inner step and the encode link, so an
every-step free rider is caught by every audit of its result, within 10 rounds with probability
0.94 at 25 (docs/protocol.md, "SparseLoCo: the inner-step audit"); more only costs more."""
VERIFICATION_COST = "about 7-10 % of its training compute"
VERIFICATION_DOCS = 'docs/protocol.md, "Public runs and verification"'
SPARSELOCO_AUDIT_DOCS = 'docs/protocol.md, "SparseLoCo: the inner-step audit"'


def unverified_public_run_warning(run_id: str) -> str:
    """``create-run``'s warning for a public run (docs/protocol.md, "Public runs and
    verification"): a new run has no config, so nothing is verified until ``update-config``
    gives one that sets ``verification_percent``."""
    vp = PUBLIC_RUN_VERIFICATION_PERCENT
    return (
        f"run {run_id!r} is public and no result is verified until its config sets "
        f"config.verification_percent: give update-config a config with "
        f"verification_percent = {vp} (each client then spends {VERIFICATION_COST} "
        f"recomputing sampled DisTrO results; {SPARSELOCO_VERIFICATION_PERCENT} for SparseLoCo, "
        "whose results are audited instead) - "
        f"{VERIFICATION_DOCS}"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """What a run-config file describes; ``warnings`` lists keys that were accepted but dropped."""

    run_id: str | None
    config: CoordinatorConfig
    model: Model
    run_state: str = "WaitingForMembers"
    extra: dict[str, Any] = field(default_factory=dict)
    """Tables we carry but do not interpret here (``progress``, ``epoch_state``, ``metadata``)."""
    warnings: tuple[str, ...] = ()

    def check(self) -> None:
        """All rules of the run, the config and the model, naming the first broken one. The
        config and model part (through the cold-start rule) is the program's ``update`` check;
        the run part and :meth:`LLM.check_client_support` exist only on this side."""
        if self.run_id is not None:
            if not self.run_id:
                raise ConfigError("run_id must not be empty")
            if len(self.run_id.encode()) > RUN_ID_MAX_LEN:
                raise ConfigError(
                    f"run_id ({self.run_id!r}) must be at most {RUN_ID_MAX_LEN} bytes"
                )
            if "\0" in self.run_id:
                raise ConfigError("run_id must not contain a NUL character")
        if self.run_state != RUN_STATE:
            raise ConfigError(
                f"run_state ({self.run_state!r}) must be {RUN_STATE!r}: every run starts there"
            )
        self.config.check()
        self.model.check()
        llm = self.model
        if isinstance(llm, LLM):
            llm.check_cold_start_warmup_steps(self.config)
            llm.check_client_support()

    def advisories(self) -> list[str]:
        """Valid but risky settings (warnings, never errors); see
        :meth:`CoordinatorConfig.advisories`. (``verification_percent`` with SparseLoCo checks
        results too, by auditing one inner step of each sampled result: docs/protocol.md,
        "SparseLoCo: the inner-step audit".)"""
        return self.config.advisories()

    def public_run_advisories(self) -> list[str]:
        """What a public run (one whose ``local_run`` flag is off: its clients need not trust
        each other) pays without verification, for ``update-config`` to warn about: a run with
        ``verification_percent = 0``, DisTrO or SparseLoCo (docs/protocol.md, "Public runs and
        verification")."""
        sparseloco = isinstance(self.model, LLM) and isinstance(
            self.model.optimizer, SparseLoCoOptimizer
        )
        if sparseloco and self.config.verification_percent == 0:
            return [
                "config.verification_percent = 0 on a public run: no SparseLoCo result is "
                "audited, so a client that sends garbage or an update from part of its batch "
                "has it applied and is paid in full; set it to "
                f"{SPARSELOCO_VERIFICATION_PERCENT}: each client then replays one inner step of "
                "each result it audits, fetching 32-44 bytes per parameter of its trainer's "
                f"committed states, which ejects such a client - {SPARSELOCO_AUDIT_DOCS}"
            ]
        if self.config.verification_percent == 0:
            return [
                "config.verification_percent = 0 on a public run: no result is recomputed, so "
                "a client that sends garbage (a flipped, random or made-up update) instead of "
                "its work has it applied and is paid in full; set it to "
                f"{PUBLIC_RUN_VERIFICATION_PERCENT}: each client then spends {VERIFICATION_COST} "
                "recomputing sampled results, which ejects such a client (and one that trains "
                f"on half its batch within 10 rounds with probability 0.93) - {VERIFICATION_DOCS}"
            ]
        return []


def parse_toml(text: str, source: str = "<string>") -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    # ValueError besides TOMLDecodeError: an integer literal past Python's int/str digit limit.
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{source}: malformed TOML: {e}") from None


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text (TOML is UTF-8 by definition); ConfigError names what is wrong."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{p}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None


def run_config_from_obj(doc: dict[str, Any], *, require_run_id: bool = False) -> RunConfig:
    """Build a :class:`RunConfig` from a parsed TOML/JSON document (no rule checks yet)."""
    doc = dict(doc)
    warnings: list[str] = []
    model = doc.get("model")
    extra_model = doc.pop("model_extra_data", None)
    if extra_model is not None:
        if not isinstance(model, dict) or not isinstance(model.get("LLM"), dict):
            raise ConfigError("model_extra_data needs a [model.LLM] table")
        if not isinstance(extra_model, dict):
            raise ConfigError("model_extra_data must be a table")
        model = {"LLM": {**model["LLM"], **extra_model}}
        doc["model"] = model
        warnings.append("merged [model_extra_data] into [model.LLM]")
    for table, keys in IGNORED_KEYS.items():
        node: Any = doc
        for part in table.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            for key in keys:
                if key in node:
                    node = _drop(doc, table, key)
                    warnings.append(f"{table}.{key} is not part of this protocol and was ignored")
    _older_keys(doc, warnings)
    known = {"run_id", "run_state", "config", "model", "progress", "epoch_state", "metadata"}
    for key in doc:
        if key not in known:
            raise ConfigError(f"{key}: unknown key (expected one of: {', '.join(sorted(known))})")
    if "config" not in doc:
        raise ConfigError("config: missing [config] table")
    if "model" not in doc:
        raise ConfigError("model: missing [model.LLM] table")
    run_id = doc.get("run_id")
    if run_id is None and require_run_id:
        raise ConfigError(
            'run_id: missing key (a state file needs run_id = "..."; validate-config also '
            "takes --run-id for a Solana run config)"
        )
    if run_id is not None and not isinstance(run_id, str):
        raise ConfigError(f"run_id: expected a string, got {run_id!r}")
    run_state = doc.get("run_state", "WaitingForMembers")
    if not isinstance(run_state, str):
        raise ConfigError(f"run_state: expected a string, got {run_state!r}")
    return RunConfig(
        run_id=run_id,
        run_state=run_state,
        config=from_obj(CoordinatorConfig, doc["config"], "config"),
        model=from_obj(Model, doc["model"], "model"),
        extra={k: doc[k] for k in ("progress", "epoch_state", "metadata") if k in doc},
        warnings=tuple(warnings),
    )


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _older_keys(doc: dict[str, Any], warnings: list[str]) -> None:
    """Rewrite, in place, the keys of older reference configs into this protocol's keys.

    ``config.rounds_per_epoch = R`` (the epoch ended after R rounds) becomes
    ``config.epoch_time = warmup_time + (R - 2) * (max_round_train_time + round_witness_time)``:
    the epoch timer starts with Warmup and is checked at the end of each round, after which two
    drain rounds run, so when Warmup and every round run to their time limits the epoch has R
    rounds, as before (faster rounds fit more into the same time). An absent
    ``model.LLM.cold_start_warmup_steps`` is 0: no extra LR ramp after a cold start, which
    those configs did not have.
    """
    config = doc.get("config")
    if isinstance(config, dict) and "rounds_per_epoch" in config:
        config = doc["config"] = dict(config)
        rounds = config.pop("rounds_per_epoch")
        if "epoch_time" in config:
            raise ConfigError(
                "config.rounds_per_epoch: give either it (older configs) or config.epoch_time"
            )
        if not _int(rounds) or rounds <= DRAIN_ROUNDS:
            raise ConfigError(
                f"config.rounds_per_epoch ({rounds!r}) must be an integer greater than "
                f"{DRAIN_ROUNDS}: the last {DRAIN_ROUNDS} rounds of an epoch apply results "
                "instead of training"
            )
        needed = ("warmup_time", "max_round_train_time", "round_witness_time")
        missing = [k for k in needed if not _int(config.get(k))]
        if missing:
            raise ConfigError(
                "config.rounds_per_epoch is converted to config.epoch_time from "
                + ", ".join(f"config.{k}" for k in needed)
                + "; missing or not an integer: "
                + ", ".join(f"config.{k}" for k in missing)
            )
        round_time = config["max_round_train_time"] + config["round_witness_time"]
        epoch_time = config["warmup_time"] + (rounds - DRAIN_ROUNDS) * round_time
        config["epoch_time"] = epoch_time
        warnings.append(
            f"config.rounds_per_epoch = {rounds} became config.epoch_time = {epoch_time} "
            f"(warmup_time + ({rounds} - {DRAIN_ROUNDS}) x (max_round_train_time + "
            "round_witness_time)): epochs are timed now, so faster rounds fit more per epoch"
        )
    model = doc.get("model")
    if not isinstance(model, dict):
        return
    llm = model.get("LLM")
    if isinstance(llm, dict) and "cold_start_warmup_steps" not in llm:
        doc["model"] = {**model, "LLM": {**llm, "cold_start_warmup_steps": 0}}
        warnings.append("model.LLM.cold_start_warmup_steps is absent: using 0")


def _drop(doc: dict[str, Any], table: str, key: str) -> Any:
    node: Any = doc
    parts = table.split(".")
    for part in parts:
        node[part] = dict(node[part])
        node = node[part]
    node.pop(key)
    return node


def load_run_config(path: str | Path, *, require_run_id: bool = False) -> RunConfig:
    """Read, parse and validate a state/config TOML file; ConfigError names the problem."""
    p = Path(path)
    rc = run_config_from_obj(parse_toml(read_text(p), str(p)), require_run_id=require_run_id)
    rc.check()
    return rc


@dataclass(frozen=True, slots=True, kw_only=True)
class DataConfig:
    """``data.toml`` of the TCP data server: where the token files are and how to cut them."""

    dir: str
    """Directory of token files, relative to the data.toml file."""
    token_size: TokenSize
    seq_len: U32
    shuffle_seed: tuple[U8, ...] = (0,) * 32
    """32 bytes seeding the sample shuffle."""

    def check(self) -> None:
        if self.seq_len == 0:
            raise ConfigError("seq_len must be greater than 0")
        if len(self.shuffle_seed) != 32:
            raise ConfigError(f"shuffle_seed must have 32 bytes, got {len(self.shuffle_seed)}")

    def check_model(self, llm: LLM, source: str | Path) -> None:
        """A data server cuts samples of its own ``seq_len``; the run's clients ask for
        ``max_seq_len`` tokens each, so the two must agree."""
        if self.seq_len != llm.max_seq_len:
            raise ConfigError(
                f"{source}: seq_len ({self.seq_len}) must equal the run's "
                f"model.LLM.max_seq_len ({llm.max_seq_len})"
            )

    def resolved_dir(self, toml_path: str | Path) -> Path:
        return (Path(toml_path).parent / self.dir).resolve()


def load_data_config(path: str | Path) -> DataConfig:
    p = Path(path)
    dc: DataConfig = from_obj(DataConfig, parse_toml(read_text(p), str(p)), "data")
    dc.check()
    return dc
