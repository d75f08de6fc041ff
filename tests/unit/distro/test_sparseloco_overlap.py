"""SparseLoCo's near-duplicate rule (``psyche.distro.sparseloco_overlap``): a copy of another
trainer's result with a few signs flipped is refused through the round's copy check, honest
results of different trainers are not, and dense chunk groups are left out of the measure."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from psyche.distro.result_format import SparseLoCoFormat
from psyche.distro.sparseloco import SparseLoCoPayload, SparseTensor
from psyche.distro.sparseloco_overlap import near_duplicate, signed_overlap, sparse_groups

from ..daemon.copy_helpers import copied, held_in_round
from ..daemon.test_sparseloco_kit import _trainer
from ..training.helpers import batch_of


def flipped(payload: SparseLoCoPayload, share: float, seed: int = 0) -> SparseLoCoPayload:
    """``payload`` with about ``share`` of its kept entries' signs flipped."""
    gen = np.random.default_rng(seed)
    tensors = []
    for t in payload.tensors:
        signs = tuple(np.where(gen.random(s.shape) < share, 1 - s, s) for s in t.signs)
        tensors.append(SparseTensor(t.indices, signs, t.mags, t.scales))
    return SparseLoCoPayload(payload.step, payload.trainer_nonce, tuple(tensors))


WIRES: dict[int, bytes] = {}
"""The wire bytes of each decoded result of the fixture, by ``id``."""


@pytest.fixture(scope="module")
def rounds() -> tuple[SparseLoCoFormat, list[list[SparseLoCoPayload]]]:
    """Three trainers' results over three rounds from one shared model (config/tiny-sparseloco:
    top-8 of 256, H = 2), each on its own samples."""
    trainers = [_trainer() for _ in range(3)]
    fmt = trainers[0].format
    assert isinstance(fmt, SparseLoCoFormat)
    out = []
    for step in range(3):
        row = []
        for i, t in enumerate(trainers):
            wire = t.train_round(batch_of(10 * step + i), step=step, lr=4e-3).payload
            row.append(fmt.decode(wire))
            WIRES[id(row[-1])] = wire
        out.append(row)
    return fmt, out


def test_honest_results_of_different_trainers_are_not_copies(
    rounds: tuple[SparseLoCoFormat, list[list[SparseLoCoPayload]]],
) -> None:
    fmt, results = rounds
    for step in results:  # the first round from one shared model included
        for i, a in enumerate(step):
            for b in step[i + 1 :]:
                assert signed_overlap(a, b, fmt.shapes, fmt.settings) < 0.25
                assert not fmt.near_duplicate(a, b) and not fmt.near_duplicate(b, a)


def test_a_copy_with_a_few_signs_flipped_is_refused_by_the_copy_check(
    rounds: tuple[SparseLoCoFormat, list[list[SparseLoCoPayload]]],
) -> None:
    fmt, results = rounds
    original, honest = results[2][0], results[2][1]
    copy = flipped(original, 0.05)
    assert fmt.fingerprint(copy) != fmt.fingerprint(original)  # the exact rule misses it
    assert signed_overlap(copy, original, fmt.shapes, fmt.settings) == pytest.approx(0.95, abs=0.02)
    assert fmt.near_duplicate(copy, original)
    state, held = held_in_round(WIRES[id(original)], original, fmt, step=2)
    assert copied(fmt.fingerprint(copy), [state], copy, fmt) is held
    assert copied(fmt.fingerprint(honest), [state], honest, fmt) is None


def test_a_copy_changed_in_more_than_a_quarter_of_its_entries_passes(
    rounds: tuple[SparseLoCoFormat, list[list[SparseLoCoPayload]]],
) -> None:
    """The same line as DisTrO's: such a copy is a worse update, no longer the original."""
    fmt, results = rounds
    original = results[2][0]
    copy = flipped(original, 0.4, seed=1)
    assert signed_overlap(copy, original, fmt.shapes, fmt.settings) < 0.75
    assert not fmt.near_duplicate(copy, original)


def test_a_tensor_repeated_exactly_is_a_copy_whatever_the_rest(
    rounds: tuple[SparseLoCoFormat, list[list[SparseLoCoPayload]]],
) -> None:
    fmt, results = rounds
    a, b = results[2][0], results[2][1]
    counted = sparse_groups(fmt.shapes, fmt.settings)
    big = max(range(len(counted)), key=lambda n: sum(g.chunks for g in counted[n]))
    assert sum(g.chunks for g in counted[big]) >= 4
    tensors = list(b.tensors)
    tensors[big] = a.tensors[big]
    mixed = dataclasses.replace(b, tensors=tuple(tensors))
    assert signed_overlap(mixed, a, fmt.shapes, fmt.settings) < 0.75
    assert near_duplicate(mixed, a, fmt.shapes, fmt.settings)


def test_dense_groups_are_left_out() -> None:
    """Where a chunk keeps more than a quarter of its entries, honest results share its indices
    by construction: such groups are not counted."""
    t = _trainer(topk_chunk=16, topk=8)
    fmt = t.format
    assert isinstance(fmt, SparseLoCoFormat)
    assert all(g.k * 4 <= g.n for groups in sparse_groups(fmt.shapes, fmt.settings) for g in groups)
    assert not any(sparse_groups(fmt.shapes, fmt.settings))
    a = fmt.decode(t.train_round(batch_of(1), step=0, lr=4e-3).payload)
    assert signed_overlap(flipped(a, 0.05), a, fmt.shapes, fmt.settings) == 0.0
    assert not fmt.near_duplicate(flipped(a, 0.05), a)


def test_one_step_results_of_fresh_trainers_are_not_copies() -> None:
    """A joiner's first round, or a client with one sample: one inner AdamW step from zero
    moments moves every weight by about the learning rate, so the top-k magnitudes nearly tie;
    two such clients from one model must still not look like copies of each other."""
    trainers = [_trainer(inner_steps=1) for _ in range(3)]
    fmt = trainers[0].format
    assert isinstance(fmt, SparseLoCoFormat)
    results = [
        fmt.decode(t.train_round(batch_of(i, samples=1), step=0, lr=4e-3).payload)
        for i, t in enumerate(trainers)
    ]
    for i, a in enumerate(results):
        for b in results[i + 1 :]:
            assert signed_overlap(a, b, fmt.shapes, fmt.settings) < 0.25
            assert not fmt.near_duplicate(a, b)


def test_in_a_round_whose_results_are_alike_only_a_copy_is_refused(
    rounds: tuple[SparseLoCoFormat, list[list[SparseLoCoPayload]]],
) -> None:
    """As under DisTrO (psyche.distro.overlap.CLOSER): honest results that all share most of
    their entries (a converged round, here one direction with 6 % of its signs flipped each
    way) are near each other but no nearer than to the rest of the round; a copy is."""
    fmt, results = rounds
    common = results[2][0]
    honest = [flipped(common, 0.06, seed=20 + i) for i in range(3)]
    a, b, ref = honest
    assert signed_overlap(a, b, fmt.shapes, fmt.settings) > 0.8
    assert fmt.near_duplicate(a, b)  # the absolute line alone refuses an honest result
    assert not fmt.near_duplicate(a, b, ref)
    copy = flipped(b, 0.02, seed=30)
    assert fmt.near_duplicate(copy, b, ref)
    # A large tensor repeated exactly that the reference repeats too is the round's, not a copy's.
    counted = sparse_groups(fmt.shapes, fmt.settings)
    big = max(range(len(counted)), key=lambda n: sum(g.chunks for g in counted[n]))

    def sharing_big(seed: int) -> SparseLoCoPayload:
        tensors = list(flipped(common, 0.4, seed=seed).tensors)
        tensors[big] = common.tensors[big]
        return dataclasses.replace(common, tensors=tuple(tensors))

    a, b, ref = (sharing_big(40 + i) for i in range(3))
    assert signed_overlap(a, b, fmt.shapes, fmt.settings) < 0.75
    assert near_duplicate(a, b, fmt.shapes, fmt.settings)
    assert not near_duplicate(a, b, fmt.shapes, fmt.settings, ref)
    # Repeated exactly between two results, while the reference chose it nearly alike (6 % of
    # its signs its own way): still the round's (the DisTrO case at 440 samples per client,
    # psyche.distro.overlap.repeat_counts). Where the reference's tensor is far from it, the
    # repeat counts.
    near_ref = dataclasses.replace(
        ref, tensors=tuple(flipped(common, 0.06, seed=50).tensors[n] if n == big else t
                           for n, t in enumerate(ref.tensors))
    )  # fmt: skip
    assert not near_duplicate(a, b, fmt.shapes, fmt.settings, near_ref)
    far_ref = dataclasses.replace(
        ref, tensors=tuple(flipped(common, 0.5, seed=51).tensors[n] if n == big else t
                           for n, t in enumerate(ref.tensors))
    )  # fmt: skip
    assert near_duplicate(a, b, fmt.shapes, fmt.settings, far_ref)
