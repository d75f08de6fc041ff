"""No lost work: the queue of lost intervals, the retries a round takes, and their encoding.
The full behaviour (health checks, leaving clients, epochs) is in the shared vectors
``lost_work_*`` and in ``tests/unit/daemon/test_no_lost_work.py``."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from psyche.coordinator import lost_work
from psyche.coordinator.state_json import from_obj_state, to_obj_state
from psyche.coordinator.types import MAX_LOST_BATCHES, EpochState, Round
from psyche.protocol.data_selection import BatchId
from psyche.protocol.strict_obj import ConfigError

from .support import make_sim


def _queue(*sizes: int) -> EpochState:
    es = EpochState()
    start = 0
    for size in sizes:
        es.lost.append(BatchId(start, start + size - 1))
        start += size
    return es


@pytest.mark.parametrize(
    ("sizes", "n_clients", "batch_size", "taken"),
    [
        ((2, 2, 2), 4, 8, 3),  # all fit, n - 1 = 3
        ((2, 2, 2), 3, 8, 2),  # n - 1 = 2
        ((2, 2, 2), 1, 8, 0),  # a lone trainer takes none
        ((2, 2, 2), 0, 8, 0),
        ((3, 3, 3), 4, 6, 2),  # the third would exceed the batch
        ((7, 1), 4, 6, 0),  # FIFO: a head that does not fit blocks the rest
        ((1,) * 20, 50, 100, 8),  # per-round bound
        ((), 4, 8, 0),
    ],
)
def test_take_retries(sizes: tuple[int, ...], n_clients: int, batch_size: int, taken: int) -> None:
    es = _queue(*sizes)
    before = list(es.lost)
    got = lost_work.take_retries(es, n_clients, batch_size)
    assert got == before[:taken]
    assert es.lost == before[taken:]


def test_queue_is_bounded() -> None:
    es = EpochState()
    for i in range(MAX_LOST_BATCHES + 5):
        lost_work.push_lost(es, BatchId(i, i))
    lost_work.push_lost(es, None)
    assert es.lost == [BatchId(i, i) for i in range(MAX_LOST_BATCHES)]


def test_drain_rounds_did_not_train() -> None:
    c = make_sim().coord
    es = c.epoch_state
    es.start_step = 10
    rnd = Round(height=3)  # step 13
    assert lost_work.round_trained(c, rnd)
    es.last_step = 16  # drain rounds at steps 14 and 15
    assert lost_work.round_trained(c, rnd)
    es.last_step = 15  # drain rounds at steps 13 and 14
    assert not lost_work.round_trained(c, rnd)


def _state() -> dict[str, Any]:
    c = make_sim().coord
    c.epoch_state.lost = [BatchId(3, 5), BatchId(0, 0)]
    c.epoch_state.rounds[1].retries = [BatchId(7, 9)]
    return to_obj_state(c)


def test_serde_round_trip_of_lost_and_retries() -> None:
    obj = _state()
    assert obj["epoch_state"]["lost"] == [[3, 5], [0, 0]]
    assert obj["epoch_state"]["rounds"][1]["retries"] == [[7, 9]]
    assert list(obj["epoch_state"]["rounds"][1])[-1] == "retries"
    assert list(obj["epoch_state"])[-1] == "lost"
    assert to_obj_state(from_obj_state(obj)) == obj


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("lost", [[5, 3]], "end 3 is before start 5"),
        ("lost", [[1]], r"expected \[start, end\]"),
        ("lost", [[0, 2**64]], "out of range for u64"),
        ("lost", [[0, 0]] * (MAX_LOST_BATCHES + 1), "at most 64 entries"),
        ("retries", [[0, 0]] * 9, "at most 8 entries"),
        ("retries", {"start": 0}, "expected an array"),
    ],
)
def test_serde_rejects_bad_intervals(where: str, value: Any, message: str) -> None:
    obj = copy.deepcopy(_state())
    if where == "lost":
        obj["epoch_state"]["lost"] = value
    else:
        obj["epoch_state"]["rounds"][0]["retries"] = value
    with pytest.raises(ConfigError, match=message):
        from_obj_state(obj)
