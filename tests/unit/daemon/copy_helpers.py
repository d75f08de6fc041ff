"""The copy check as the tests call it: the indexed check (``psyche.daemon.rounds.copied_from``)
and the old compare-with-everything one (``copied_from_reference``) must give the same answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psyche.coordinator.scripted_clients import sim_identity
from psyche.daemon.copy_check import copied_from, copied_from_reference
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundLRs,
    RoundState,
    result_sketch,
)
from psyche.distro.copy_index import CopySketch
from psyche.distro.payload import payload_hash
from psyche.distro.result_format import ResultFormat
from psyche.protocol.data_selection import BatchId


def hold(state: RoundState, res: ReceivedResult, decoded: Any, fmt: ResultFormat) -> None:
    """Hold ``res`` in ``state`` as the daemon does: with the sketch of its decoded content."""
    state.hold(res, result_sketch(decoded, fmt))


def held_in_round(
    wire: bytes, decoded: Any, fmt: ResultFormat, step: int
) -> tuple[RoundState, ReceivedResult]:
    """A training round of ``step`` holding one result, ``wire`` (decoded: ``decoded``), sent
    by the trainer its batch was assigned to."""
    batch = BatchId(0, 3)
    res = ReceivedResult(
        sim_identity(0),
        batch,
        payload_hash(step, batch.start, batch.end, wire),
        wire,
        fmt.fingerprint(decoded),
    )
    state = RoundState(
        height=2,
        step=step,
        trains=True,
        assignment={batch: sim_identity(0)},
        lrs=RoundLRs(lr=4e-3, prev_lr=4e-3, zero_optim=False),
    )
    hold(state, res, decoded, fmt)
    return state, res


def copied(
    fingerprint: bytes,
    states: Sequence[RoundState],
    payload: Any | None = None,
    fmt: ResultFormat | None = None,
) -> ReceivedResult | None:
    """What both checks find for a result of content ``fingerprint`` (and, given them, its
    decoded ``payload`` under ``fmt``); they must agree."""
    if payload is not None and fmt is not None:
        sk = result_sketch(payload, fmt)
        assert sk.fingerprint == fingerprint
    else:
        sk = CopySketch(fingerprint)
    new = copied_from(sk, states, payload, fmt)
    old = copied_from_reference(fingerprint, states, payload, fmt)
    assert new is old, (new, old)
    return new
