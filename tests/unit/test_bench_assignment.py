"""The attack benches' data assignment (bench/byzantine_data.py): with nobody ejected it is the
fixed per-client slicing the benches always used; after an ejection the others train the whole
global batch; a rejected result's samples are trained again once, by the protocol's queue."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from psyche.protocol.data_selection import get_batch_ids_for_round

# Loaded by path: putting bench/ on sys.path would shadow other modules of its names.
_PATH = Path(__file__).resolve().parents[2] / "bench" / "byzantine_data.py"
_SPEC = importlib.util.spec_from_file_location("bench_byzantine_data", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
_MODULE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MODULE)
Assignment = _MODULE.Assignment


def _samples(slices: dict[int, object]) -> list[int]:
    return sorted(i for b in slices.values() for i in range(b.start, b.end + 1))  # type: ignore[attr-defined]


def test_nobody_ejected_is_the_fixed_slicing() -> None:
    a = Assignment(4, 32, set())
    for step in range(5):
        assert list(a.of_step(step).values()) == get_batch_ids_for_round(step * 32, 32, 4)


def test_the_others_train_an_ejected_clients_share_and_its_rejected_samples_again() -> None:
    ejected: set[int] = set()
    a = Assignment(4, 32, ejected)
    first = a.of_step(0)
    a.lose(0, 3)  # client 3's step-0 result rejected
    a.lose(0, 3)  # once only
    ejected.add(3)
    second = a.of_step(1)
    assert set(second) == {0, 1, 2}
    assert second[0] == first[3]  # the retry, whole, to the first slot
    assert len(_samples(second)) == 32  # the global batch, retry included
    assert _samples(second)[8:] == list(range(32, 56))  # then 24 fresh samples
    assert a.retried == 8
    third = a.of_step(2)
    assert _samples(third) == list(range(56, 88))  # nothing left to retry
    with pytest.raises(ValueError, match="out of order"):
        a.of_step(4)


def test_fixed_slices_ignore_ejections() -> None:
    a = Assignment(4, 32, set(), retries=False)
    a.of_step(0)
    a.lose(0, 3)
    assert a.of_step(1) == dict(enumerate(get_batch_ids_for_round(32, 32, 4)))
    assert a.retried == 0
