"""The verifier's check of a sampled result's per-sample commitments (issue 39 item 1).

See docs/protocol.md, "Free riders: per-sample commitments". A trainer in a run that verifies
commits, per micro-batch, to a fingerprint of that micro-batch's gradient at its lookahead point
(``psyche.distro.sample_commit``), and the lookahead follows its previous result sent, which
every verifier holds. A verifier of the round recomputes the micro-batch that holds its
seed-chosen sample at that same point and compares fingerprints: the point is exact, so an honest
trainer agrees to rounding (cosine 1.000000 on the tiny model at 1 and 2 threads), while any
fingerprint of a sample it skipped — another sample's, the mean of those it did, a copy, random
numbers — stays below ``MATCH_THRESHOLD`` (bench/README.md, "Per-sample commitments").

:func:`lookahead_of` finds the point, :func:`commitment_agreement` measures the agreement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import torch

from psyche.daemon.rounds import RoundState, decode_verified
from psyche.distro import Payload
from psyche.distro.result_format import ResultFormat
from psyche.distro.sample_commit import NO_LOOKAHEAD, agreement
from psyche.protocol.identity import NodeIdentity
from psyche.training.trainer import Trainer

__all__ = ["MISMATCH", "commitment_agreement", "lookahead_of"]

MISMATCH = -1.0
"""The agreement a result scores when its commitments cannot be right whatever the gradient:
the wrong number of fingerprints for its batch, or a lookahead that is not its previous result."""


def lookahead_of(
    before: RoundState | None, trainer: NodeIdentity, claim: bytes, fmt: ResultFormat
) -> tuple[Literal["ok", "mismatch", "unknown"], Payload | None]:
    """The public result ``trainer`` claims to have looked ahead by (``claim``, its content
    fingerprint), from ``before``, this client's record of the round before the judged one:
    ``("ok", None)`` for no lookahead, ``("ok", result)`` for its result of that round as held
    here, ``"mismatch"`` when the claim names anything else while this client holds that result,
    ``"unknown"`` when it does not hold it (no vote)."""
    if claim == NO_LOOKAHEAD:
        return "ok", None
    if before is None:
        return "unknown", None
    held = [r for r in before.results.values() if r.trainer == trainer and r.fingerprint]
    for r in held:
        if r.fingerprint == claim:
            decoded = decode_verified(r, before.step, fmt)
            return ("ok", decoded) if isinstance(decoded, Payload) else ("unknown", None)
    return ("mismatch" if held else "unknown"), None


def commitment_agreement(
    trainer: Trainer,
    payload: Payload,
    public: Payload | None,
    prev_lr: float,
    samples: torch.Tensor,
    row: int,
    gradient: Callable[[torch.Tensor], Sequence[torch.Tensor]],
) -> float | None:
    """Cosine between the committed fingerprint of the micro-batch that holds the batch's sample
    ``row`` and this verifier's, recomputed with ``gradient`` (in the payload's parameter order)
    at the pre-round weights moved by ``public`` (``Distro.lookahead(verifiable=True)``, undone
    after); ``MISMATCH`` when the commitments do not fit the batch; None when the payload has
    none (a run that does not take them)."""
    c = payload.commitments
    if c is None:
        return None
    if c.values.shape[0] != math.ceil(samples.shape[0] / c.group):
        return MISMATCH
    rows = c.rows(c.group_of(row), samples.shape[0])
    probe = trainer.probe(payload.step)
    trainer.distro.lookahead(prev_lr, public, verifiable=True)
    try:
        grads = gradient(samples[list(rows)])
    finally:
        trainer.distro.cancel()  # restores the pre-round weights bit for bit, no decay
    mine = probe.project(probe.gather(list(grads)))
    return agreement(c.values[c.group_of(row)], mine)
