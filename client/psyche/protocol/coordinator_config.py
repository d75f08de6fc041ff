"""``CoordinatorConfig``: the timing, membership and batch-size rules of a run (``[config]`` in
state.toml), and the protocol's size limits.

Field order is the on-chain order; the type is a frozen, slotted dataclass whose ``check()`` raises
:class:`ConfigError` naming the key and the rule, in the program's order
(``CoordinatorConfig::check``). ``verification_percent`` must be 0: verification is not implemented
(the reference accepted any value and then crashed the client when a verifier was drawn).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from psyche.protocol.config_rules import rule
from psyche.protocol.strict_obj import U8, U16, U32, U64

MAX_CLIENTS = 256
MAX_WITNESSES = 32
RUN_ID_MAX_LEN = 32


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
        rule(c.epoch_time > 0, "config.epoch_time must be greater than 0")
        rule(
            c.warmup_time < c.epoch_time,
            f"config.warmup_time ({c.warmup_time}) must be less than "
            f"config.epoch_time ({c.epoch_time})",
        )
        rule(c.max_round_train_time > 0, "config.max_round_train_time must be greater than 0")
        rule(
            c.max_round_train_time < c.epoch_time,
            f"config.max_round_train_time ({c.max_round_train_time}) must be less than "
            f"config.epoch_time ({c.epoch_time})",
        )
        rule(c.round_witness_time > 0, "config.round_witness_time must be greater than 0")
        rule(c.min_clients > 0, "config.min_clients must be greater than 0")
        rule(
            c.init_min_clients >= c.min_clients,
            f"config.init_min_clients ({c.init_min_clients}) must be at least "
            f"config.min_clients ({c.min_clients})",
        )
        rule(
            c.init_min_clients <= MAX_CLIENTS,
            f"config.init_min_clients ({c.init_min_clients}) must be at most {MAX_CLIENTS}",
        )
        rule(c.global_batch_size_start > 0, "config.global_batch_size_start must be greater than 0")
        rule(c.global_batch_size_end > 0, "config.global_batch_size_end must be greater than 0")
        rule(
            c.global_batch_size_end >= c.global_batch_size_start,
            f"config.global_batch_size_end ({c.global_batch_size_end}) must be at least "
            f"config.global_batch_size_start ({c.global_batch_size_start})",
        )
        rule(c.total_steps > 0, "config.total_steps must be greater than 0")
        rule(
            c.witness_nodes <= c.min_clients,
            f"config.witness_nodes ({c.witness_nodes}) must be at most "
            f"config.min_clients ({c.min_clients})",
        )
        rule(
            c.witness_nodes <= MAX_WITNESSES,
            f"config.witness_nodes ({c.witness_nodes}) must be at most {MAX_WITNESSES}",
        )
        rule(c.cooldown_time > 0, "config.cooldown_time must be greater than 0")
        rule(
            c.waiting_for_members_extra_time > 0,
            "config.waiting_for_members_extra_time must be greater than 0",
        )
        rule(
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
        """Witness quorum: W ≤ 3 → {1, 2, 2}; otherwise max(1, ⌊2W/3⌋).

        See docs/protocol.md, "Quorum".
        """
        w = self.witness_nodes if self.witness_nodes else n
        if w <= 1:
            return 1
        if w <= 3:
            return 2
        return max(1, w * 2 // 3)
