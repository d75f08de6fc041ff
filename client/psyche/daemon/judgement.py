"""What a verifier of a round holds between its recompute and its witness.

``psyche.daemon.verifying`` fills a :class:`Judgement` at the start of round ``r + 1`` and reads
it back when the witness is sent; in between it rides in the round's
``psyche.daemon.rounds.RoundState``. The record lives apart from both so that the round state can
carry it without depending on the verifier, which itself works on round states: neither module
imports the other's way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import torch

from psyche.distro.result_format import ResultFormat
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity

__all__ = ["Judgement", "PendingVote", "SlotGradient", "SubBatch"]


@dataclass(frozen=True, slots=True)
class SubBatch:
    """Which samples of a batch are recomputed (offsets in the batch, ascending): ``rows`` first,
    ``escalation`` before an accusation (from the verifier's own start of the shuffle, so not
    always a superset of ``rows``: see ``psyche.daemon.verifying.sub_batch``)."""

    rows: tuple[int, ...]
    escalation: tuple[int, ...] = ()
    committed: int | None = None
    """The sample whose per-sample commitment is checked (None: ``rows[0]``). The same for every
    verifier of the slot, so that their votes on a commitment, which is exact, always agree: with
    a sample each, a free rider splits them (one draws a skipped sample, two draw trained ones),
    and the match majority makes the one right verifier a false accuser."""

    def of(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens[list(self.rows)]

    @property
    def escalates(self) -> bool:
        """Whether escalating recomputes more samples than ``rows``."""
        return len(self.escalation) > len(self.rows)

    def escalated(self) -> SubBatch:
        return SubBatch(self.escalation, self.escalation, self.committed)

    @property
    def commitment_row(self) -> int:
        return self.rows[0] if self.committed is None else self.committed


@dataclass(frozen=True, slots=True)
class SlotGradient:
    """One sampled result this verifier judges, and the gradient it recomputed for it (None
    until recomputed, and when the time budget ran out first)."""

    slot: int
    trainer: NodeIdentity
    batch: BatchId
    sub: SubBatch
    grads: tuple[torch.Tensor, ...] | None = None
    may_accuse: bool = False
    """Whether ``grads`` is of the escalation's samples: only then may a low score accuse."""
    score: float | None = None
    """``grads``' score of the held result when the recompute already took it (to decide on
    escalating), so the verdict does not decode and score the result again."""
    commitment: float | None = None
    """The agreement of the held result's per-sample commitment with this verifier's recompute
    (``psyche.daemon.commit_check``); None when not checked."""
    audit: bool | None = None
    """A SparseLoCo result's audited link held (``psyche.daemon.sparseloco_verifying``); None
    when not audited."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """What a verifier of the current round needs at witness time."""

    judged_height: int
    slots: tuple[SlotGradient, ...]
    fmt: ResultFormat
    chunk: int
    pending: tuple[PendingVote, ...] = ()
    """Votes decided after the recompute, before the witness goes out."""

    def settled(self) -> bool:
        """Whether every pending vote is decided (the witness waits for them, within their
        deadline: the RoundWitness phase sends it regardless)."""
        return all(p.task.done() for p in self.pending)


@dataclass(frozen=True, slots=True)
class PendingVote:
    """Whether the trainer of ``slot`` served the states it committed to, decided when ``task``
    ends (``psyche.daemon.sparseloco_verifying``: a SparseLoCo audit whose fetch did not finish
    within the verifier's budget goes on until a later deadline)."""

    slot: int
    task: asyncio.Task[bool | None]
    """True: served; False: denied (a mismatch); None: undecided (unchecked)."""
