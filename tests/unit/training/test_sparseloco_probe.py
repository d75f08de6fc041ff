"""The probe of inner step 0 in a SparseLoCo result's audit trailer: what a verifier checks when
the trainer's states do not come (a host that stays silent or trickles), from the result alone.

An honest probe holds on another thread count, after a restart of the moments and on a short
batch; a free rider's (every inner step on half its samples) fails, and so do a probe with one
value changed or a non-finite one. A rider honest in step 0 alone passes it: what the probe
cannot see, the chain's audit of a drawn step does (docs/protocol.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from psyche.daemon.sparseloco_checks import audit_probe
from psyche.distro.audit_probe import (
    PROBE_PER_TENSOR,
    decode_probe,
    encode_probe,
    probe_bytes,
    probe_positions,
)
from psyche.distro.audit_trailer import AuditCommitments
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

from .helpers import batch_of
from .test_sparseloco_audit_wire import LR, audited_round, trainer


def _audit(t: SparseLoCoTrainer, payload: bytes) -> AuditCommitments:
    audit = t.format.decode(payload).audit
    assert audit is not None
    return audit


def test_positions_are_fixed_by_the_step_distinct_and_cover_every_tensor() -> None:
    shapes = [(1000, 16), (16,), (3,), (64, 64)]
    a, b = probe_positions(shapes, 5), probe_positions(shapes, 5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert [len(p) for p in a] == [PROBE_PER_TENSOR, 16, 3, PROBE_PER_TENSOR]
    for p, s in zip(a, shapes, strict=True):
        assert len(set(p.tolist())) == len(p) and p.min() >= 0 and p.max() < np.prod(s)
    assert np.array_equal(a[2], [0, 1, 2])  # a small tensor is probed whole
    assert not np.array_equal(probe_positions(shapes, 6)[0], a[0])  # each round its own
    t = trainer()
    payload, trail = audited_round(t, batch_of(1, samples=6))
    probe = _audit(t, payload).probe
    assert len(probe) == probe_bytes(t.shapes)
    assert encode_probe(decode_probe(probe, t.shapes)) == probe == encode_probe(trail.probe())


def test_an_honest_probe_holds_on_another_thread_count() -> None:
    batch = batch_of(1, samples=6)
    t, verifier = trainer(), trainer()
    payload, _ = audited_round(t, batch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        ok, why = audit_probe(verifier, _audit(t, payload), batch, LR, 2)
    finally:
        torch.set_num_threads(threads)
    assert ok, why
    before = [p.detach().clone() for p in verifier.params]
    assert audit_probe(verifier, _audit(t, payload), batch, LR, 2)[0]
    assert all(torch.equal(a, p) for a, p in zip(before, verifier.params, strict=True))
    assert all(p.grad is None for p in verifier.params)  # the verifier's trainer is untouched


def test_a_probe_holds_from_fresh_moments_and_on_a_short_batch() -> None:
    t, verifier = trainer(), trainer()
    batch = batch_of(2, samples=2)  # fewer samples than inner steps: fewer links
    out = t.train_step(batch, step=0, lr=LR, prev_lr=LR, prev_self_results=None, zero_optim=True)
    audit = _audit(t, out.payload)
    assert audit.links == 2 and not decode_probe(audit.probe, t.shapes).counts.any()
    ok, why = audit_probe(verifier, audit, batch, LR, 0)
    assert ok, why


def test_a_free_riders_probe_fails_and_so_does_a_changed_or_non_finite_one() -> None:
    batch = batch_of(1, samples=6)
    rider, verifier = trainer(), trainer()

    def half_step(part: torch.Tensor, lr: float, cancel: object) -> float:
        return SparseLoCoTrainer._inner_step(rider, part[: max(1, part.shape[0] // 2)], lr, None)

    rider._inner_step = half_step  # type: ignore[method-assign]
    payload, _ = audited_round(rider, batch)
    ok, why = audit_probe(verifier, _audit(rider, payload), batch, LR, 2)
    assert not ok and why.startswith("its probe of inner step 0 is off"), why

    t = trainer()
    honest = _audit(t, audited_round(t, batch)[0])
    probe = decode_probe(honest.probe, t.shapes)
    for row, value in ((3, 1.0), (2, float("nan"))):  # m_1 made up; a NaN weight
        rows = [r.copy() for r in probe.rows]
        rows[4][row, 0] = value
        changed = encode_probe(dataclasses.replace(probe, rows=tuple(rows)))
        ok, why = audit_probe(verifier, dataclasses.replace(honest, probe=changed), batch, LR, 2)
        assert not ok, why
    # Another round's positions are not this probe's.
    assert not audit_probe(verifier, honest, batch, LR, 3)[0]


def test_a_rider_honest_in_step_0_alone_passes_the_probe() -> None:
    """The probe's limit, pinned: it sees inner step 0 only (docs/protocol.md)."""
    batch = batch_of(1, samples=6)
    rider, verifier = trainer(), trainer()
    steps = []

    def lazy_after_first(part: torch.Tensor, lr: float, cancel: object) -> float:
        steps.append(1)
        if len(steps) % 3 != 1:  # H = 3 inner steps a round: the first one is honest
            part = part[: max(1, part.shape[0] // 2)]
        return SparseLoCoTrainer._inner_step(rider, part, lr, None)

    rider._inner_step = lazy_after_first  # type: ignore[method-assign]
    payload, _ = audited_round(rider, batch)
    assert audit_probe(verifier, _audit(rider, payload), batch, LR, 2)[0]
