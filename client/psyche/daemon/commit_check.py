"""The verifier's check of a sampled result's per-sample commitments (issue 39 item 1).

See docs/protocol.md, "Free riders: per-sample commitments". A trainer in a run that verifies
commits, per micro-batch, to a fingerprint of that micro-batch's gradient at its lookahead point
(``psyche.distro.sample_commit``), and the lookahead follows its previous result sent, which
every verifier holds. A verifier of the round recomputes the micro-batch that holds its
seed-chosen sample at that same point and compares fingerprints: the point is exact, so an honest
trainer agrees to rounding (cosine 1.000000 on the tiny model at 1 and 2 threads), while any
fingerprint of a sample it skipped — another sample's, the mean of those it did, a copy, random
numbers — stays below ``MATCH_THRESHOLD`` (bench/README.md, "Per-sample commitments").

:func:`lookahead_of` finds the point, :func:`at_point` sets it, :func:`commitment_agreement`
measures the agreement (:func:`fingerprint_agreement` from a gradient already taken there).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import torch

from psyche.daemon.rounds import RoundState, decode_verified
from psyche.distro import Payload
from psyche.distro.result_format import ResultFormat
from psyche.distro.sample_commit import NO_LOOKAHEAD, agreement
from psyche.protocol.identity import NodeIdentity
from psyche.training.trainer import Trainer

__all__ = [
    "MISMATCH",
    "at_point",
    "commitment_agreement",
    "committed_rows",
    "fingerprint_agreement",
    "lookahead_of",
]

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


@contextlib.contextmanager
def at_point(trainer: Trainer, public: Payload | None, prev_lr: float) -> Iterator[None]:
    """The model at the pre-round weights moved by ``public`` as the trainer's verifiable
    lookahead moved them (``Distro.lookahead(verifiable=True)``); the pre-round weights again
    after, bit for bit (no decay: the pre-round weights already hold it)."""
    trainer.distro.lookahead(prev_lr, public, verifiable=True)
    try:
        yield
    finally:
        trainer.distro.cancel()


def committed_rows(payload: Payload, batch_size: int, row: int) -> tuple[int, ...] | None:
    """The batch offsets of the micro-batch whose fingerprint covers the sample ``row``; None
    when the commitments do not fit a batch of ``batch_size`` (a mismatch)."""
    c = payload.commitments
    assert c is not None
    if c.values.shape[0] != math.ceil(batch_size / c.group):
        return None
    return c.rows(c.group_of(row), batch_size)


def fingerprint_agreement(
    trainer: Trainer, payload: Payload, row: int, grads: Sequence[torch.Tensor]
) -> float:
    """Cosine between the committed fingerprint of the micro-batch holding the sample ``row``
    and that of ``grads``, this verifier's gradient of that micro-batch at the trainer's point
    (in the payload's parameter order)."""
    c = payload.commitments
    assert c is not None
    probe = trainer.probe(payload.step)
    return agreement(c.values[c.group_of(row)], probe.project(probe.gather(list(grads))))


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
    at the pre-round weights moved by ``public`` (:func:`at_point`); ``MISMATCH`` when the
    commitments do not fit the batch; None when the payload has none (a run that does not take
    them)."""
    if payload.commitments is None:
        return None
    rows = committed_rows(payload, samples.shape[0], row)
    if rows is None:
        return MISMATCH
    with at_point(trainer, public, prev_lr):
        grads = gradient(samples[list(rows)])
    return fingerprint_agreement(trainer, payload, row, grads)
