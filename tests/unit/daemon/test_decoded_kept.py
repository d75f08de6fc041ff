"""A held result's decoded payload is kept for its apply, within the round's budget (issue 38:
each result was decoded twice per client, to verify it and again to apply it)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import psyche.daemon.rounds as rounds
from psyche.daemon.rounds import ReceivedResult, RoundLRs, RoundState
from psyche.distro.compress import DistroResult
from psyche.distro.copy_index import CopySketch
from psyche.distro.payload import Payload
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity

LRS = RoundLRs(lr=1e-3, prev_lr=1e-3, zero_optim=False)
WHO = NodeIdentity.from_single_key(b"\x01" * 32)


def _payload(k: int) -> Payload:
    result = DistroResult(
        torch.arange(k, dtype=torch.int64).reshape(1, k), torch.ones(1, k), (8, 8), 64
    )
    return Payload(1, 0, 1, 0, True, (result,))


class _Format:
    """Counts decodes; a fresh payload for each (as a real decoder returns)."""

    def __init__(self) -> None:
        self.decodes = 0

    def decode(self, data: bytes) -> Any:
        self.decodes += 1
        return _payload(4)


def _held(state: RoundState, batch: BatchId, decoded: Any) -> ReceivedResult:
    res = ReceivedResult(WHO, batch, b"\x00" * 32, b"bytes", b"fp")
    state.hold(res, CopySketch(bytes([batch.start]) * 32), decoded)
    return res


def test_the_apply_takes_the_payload_decoded_on_arrival_once() -> None:
    state, fmt = RoundState(0, 1, True, {}, LRS), _Format()
    decoded = _payload(4)
    res = _held(state, BatchId(0, 1), decoded)
    assert state.decoded_bytes == 4 * 8 + 4 * 4
    assert state.kept_decoded(res) is decoded
    assert state.take_decoded(res, fmt) is decoded and fmt.decodes == 0
    # Taken for the apply, its last use: no longer kept, so a second take decodes.
    assert state.kept_decoded(res) is None
    state.take_decoded(res, fmt)
    assert fmt.decodes == 1


def test_past_the_budget_results_are_decoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rounds, "DECODED_BUDGET", 2 * (4 * 8 + 4 * 4))
    state, fmt = RoundState(0, 1, True, {}, LRS), _Format()
    held = [_held(state, BatchId(i, i), _payload(4)) for i in range(3)]
    assert [state.kept_decoded(r) is not None for r in held] == [True, True, False]
    for r in held:
        state.take_decoded(r, fmt)
    assert fmt.decodes == 1


def test_a_result_replaced_under_its_batch_is_not_given_the_old_payload() -> None:
    state, fmt = RoundState(0, 1, True, {}, LRS), _Format()
    _held(state, BatchId(0, 1), _payload(4))
    other = ReceivedResult(WHO, BatchId(0, 1), b"\x01" * 32, b"other")
    assert state.kept_decoded(other) is None
    state.take_decoded(other, fmt)
    assert fmt.decodes == 1


def test_what_is_not_a_distro_payload_is_not_kept() -> None:
    state = RoundState(0, 1, True, {}, LRS)
    res = _held(state, BatchId(0, 1), object())
    assert state.kept_decoded(res) is None and state.decoded_bytes == 0
