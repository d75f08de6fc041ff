"""``CoordinatorConfig``: the timing, membership and batch-size rules of a run (``[config]`` in
state.toml), and the protocol's size limits.

Field order is the on-chain order; the type is a frozen, slotted dataclass whose ``check()`` raises
:class:`ConfigError` naming the key and the rule, in the program's order
(``CoordinatorConfig::check``). ``verification_percent`` (0..=100) is the share of each round's
results sampled for recompute verification, never a Verifier committee (the reference accepted
any value and then crashed the client when a verifier was drawn; docs/protocol.md item 10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from psyche.protocol.config_rules import rule
from psyche.protocol.strict_obj import U8, U16, U32, U64

MAX_CLIENTS = 256
MAX_WITNESSES = 32
RUN_ID_MAX_LEN = 32
STEP_MAX = 2**32 - 1
"""``progress.step`` and ``epoch_state.last_step`` are u32 on chain."""
EPOCH_MAX = 2**16 - 1
"""``progress.epoch`` is a u16 on chain."""
DRAIN_STEPS = 2
"""An epoch ends 2 rounds after it winds down (``last_step = step + 2``)."""
TIME_LIMIT_MAX = 2**64 - 1 - 2**32
"""Longest time limit: its deadline, from any unix time before 2106, still fits the u64 clock."""
_TIME_LIMITS = ("warmup_time", "cooldown_time", "max_round_train_time", "round_witness_time",
                "epoch_time")  # fmt: skip
"""An epoch ends 2 rounds after it winds down (``last_step = step + 2``)."""


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
    """Percent (0..=100) of each round's results sampled for verification (docs/protocol.md,
    "Threat model and result verification"); never a Verifier committee. DisTrO results are
    recomputed; SparseLoCo results carry a chain of inner-state commitments, one link of which
    is audited ("SparseLoCo: the inner-step audit")."""
    waiting_for_members_extra_time: U8 = 3
    """Grace seconds in WaitingForMembers before Warmup (defaults to 3 when omitted, as some
    reference configs omit it)."""

    def check(self) -> None:
        """Validate in the reference's order, naming the key and the rule: the groups below are
        consecutive runs of ``CoordinatorConfig::check``'s rules."""
        self._check_phase_times()
        self._check_clients_and_batches()
        self._check_counter_limits()
        self._check_witnesses()
        c = self
        rule(c.cooldown_time > 0, "config.cooldown_time must be greater than 0")
        rule(
            c.waiting_for_members_extra_time > 0,
            "config.waiting_for_members_extra_time must be greater than 0",
        )
        rule(
            c.verification_percent <= 100,
            f"config.verification_percent ({c.verification_percent}) must be at most 100",
        )

    def _check_phase_times(self) -> None:
        """An epoch longer than Warmup and than a round's training; every phase of a round
        lasts."""
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

    def _check_clients_and_batches(self) -> None:
        """Client counts within the coordinator's room, a batch-size ramp that grows, a run that
        trains."""
        c = self
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

    def _check_counter_limits(self) -> None:
        """Nothing the on-chain counters cannot reach: time limits within the u64 clock, steps
        within the u32 step counter, epochs within the u16 epoch counter."""
        c = self
        for key in _TIME_LIMITS:
            value = getattr(c, key)
            rule(
                value <= TIME_LIMIT_MAX,
                f"config.{key} ({value}) must be at most {TIME_LIMIT_MAX}: a longer limit "
                "ends after the u64 clock does, so it can never be met",
            )
        rule(
            c.total_steps <= STEP_MAX - DRAIN_STEPS,
            f"config.total_steps ({c.total_steps}) must be at most {STEP_MAX - DRAIN_STEPS}: "
            "the step counter (u32) goes 2 drain rounds past it",
        )
        rule(
            c.total_steps - 1 <= EPOCH_MAX * c.slowest_epoch_steps(),
            f"config.total_steps ({c.total_steps}) must be at most "
            f"{EPOCH_MAX * c.slowest_epoch_steps() + 1}: with every phase at its time limit an "
            f"epoch takes {c.slowest_epoch_steps()} steps, and the epoch counter (u16) holds "
            f"{EPOCH_MAX} epochs",
        )

    def _check_witnesses(self) -> None:
        """No more witnesses than the fewest clients, nor than the coordinator holds."""
        c = self
        rule(
            c.witness_nodes <= c.min_clients,
            f"config.witness_nodes ({c.witness_nodes}) must be at most "
            f"config.min_clients ({c.min_clients})",
        )
        rule(
            c.witness_nodes <= MAX_WITNESSES,
            f"config.witness_nodes ({c.witness_nodes}) must be at most {MAX_WITNESSES}",
        )

    def slowest_epoch_steps(self) -> int:
        """Steps of one epoch when Warmup and every round run to their time limits (all clients
        honest, none early): the rounds that end by ``epoch_time`` (at least the first), then the
        two drain rounds. It bounds how many epochs a run takes to reach ``total_steps``. Needs
        ``max_round_train_time`` and ``round_witness_time`` > 0 (checked before)."""
        warmup = max(self.warmup_time, 1)  # a phase lasts at least one second
        round_time = self.max_round_train_time + self.round_witness_time
        trained = max(1, -(-(self.epoch_time - warmup) // round_time))
        return trained + DRAIN_STEPS

    def advisories(self) -> list[str]:
        """Valid but risky settings, for a warning (never an error): see
        :meth:`_witness_advisories` and :meth:`_timing_advisories`."""
        return self._witness_advisories() + self._timing_advisories()

    def _timing_advisories(self) -> list[str]:
        """Runs that work but not as the numbers suggest: a 1-step run is Finished as soon as it
        is resumed (the step counter starts at 1); an epoch shorter than Warmup plus one round
        trains one round and then drains, whenever Warmup and the round use their full time."""
        out = []
        if self.total_steps == 1:
            out.append(
                "config.total_steps = 1: the step counter starts at 1, so the run is Finished "
                "as soon as it is resumed and trains nothing"
            )
        one_round = self.warmup_time + self.max_round_train_time + self.round_witness_time
        if self.epoch_time < one_round:
            out.append(
                f"config.epoch_time ({self.epoch_time}) is shorter than Warmup plus one round "
                f"({one_round} s at their limits): such epochs train one round, then drain 2"
            )
        return out

    def _witness_advisories(self) -> list[str]:
        """A witness quorum that one member can reach alone decides consensus and who is
        ejected; one that a single absent witness can miss ends the epoch."""
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
