"""A SparseLoCo trainer's committed moments cannot exceed what clipped gradients make.

Every inner gradient is clipped to norm ``clip_grad_norm``, and AdamW's first moment is an
average of them, so its norm over the model never exceeds that bound (each second moment never
exceeds its square). A trainer that picks its starting moments (an epoch's first round, where no
earlier result binds them) can steer its update with moments it did not earn while doing every
step honestly: every replay from its states then holds, and only their size tells
(``audit_compare.moment_scale``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from psyche.daemon.sparseloco_checks import audit_link, audit_probe
from psyche.training.audit_compare import HIDDEN_LIMIT, MOMENT_SLACK, TOLERANCE, moment_scale
from psyche.training.sparseloco_audit import decode_state, inner_batches, replay_link
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

from .helpers import batch_of
from .test_audit_hidden_gradient import LR, H, trainer

CLIP = 1.0
"""The clip bound of :func:`trainer`'s config."""


def tilted(t: SparseLoCoTrainer, norm: float) -> None:
    """First moments of ``norm`` over the model in a direction of the trainer's own, second
    moments their squares: a sign step of its choosing, then honest work."""
    g = torch.Generator().manual_seed(11)
    m = [torch.randn(p.shape, generator=g) for p in t.params]
    size = norm / math.sqrt(sum(float(x.double().square().sum()) for x in m))
    for p, x in zip(t.params, m, strict=True):
        t._inner.state[p] = {
            "step": torch.tensor(50.0),
            "exp_avg": (size * x).to(p.dtype),
            "exp_avg_sq": (size * x).square().to(p.dtype),
        }


def _round(t: SparseLoCoTrainer, batch: torch.Tensor) -> tuple[bytes, Any, dict[bytes, bytes]]:
    """One audited round: its payload, its audit commitments and every blob its host serves."""
    t.set_audit(True)
    out = t.train_step(batch, step=1, lr=LR, prev_lr=LR, prev_self_results=None,
                       zero_optim=False)  # fmt: skip
    decoded = t.format.decode(out.payload)
    trail = t.last_trail
    assert trail is not None
    served = {h: trail.read(h) for h in (*trail.hashes, *trail.error_hashes)}
    return out.payload[: t.payload_bytes], decoded.audit, served  # type: ignore[attr-defined]


def test_moments_steered_beyond_the_bound_fail_while_every_replay_holds() -> None:
    rogue, verifier = trainer(), trainer()
    tilted(rogue, 3.0 * CLIP)
    batch = batch_of(1, samples=2 * H)
    payload, audit, served = _round(rogue, batch)
    trail = rogue.last_trail
    assert trail is not None
    shapes, parts = list(verifier.shapes), inner_batches(batch, H)
    before = decode_state(trail.read(trail.hashes[0]), shapes, start=verifier.params)
    after = decode_state(trail.read(trail.hashes[1]), shapes)
    v = replay_link(verifier, 0, before, after, parts[0], LR)
    # What every other check sees: an honest step from the committed state.
    assert v.step_ok and max(v.weight_error, v.moment_error) <= TOLERANCE, v
    assert v.hidden <= HIDDEN_LIMIT, v
    assert v.moments_scale == pytest.approx(3.0, rel=1e-3) and not v.ok, v
    ok, why = audit_link(verifier, 0, audit, served, batch, LR, payload)
    assert not ok and "× the clip bound" in why, why
    rogue.discard_trail()


def test_moments_inside_the_bound_pass() -> None:
    """Within the bound a chosen start is not told from a history (so the bound limits how much
    a steered start can carry, not whether there is one); and the probe, whose 16 values per
    tensor hold a sliver of the norm, passes even the one beyond it."""
    for times, link_ok in ((0.9, True), (3.0, False)):
        rogue, verifier = trainer(), trainer()
        tilted(rogue, times * CLIP)
        batch = batch_of(2, samples=2 * H)
        payload, audit, served = _round(rogue, batch)
        ok, why = audit_link(verifier, 0, audit, served, batch, LR, payload)
        assert ok is link_ok, why
        ok, why = audit_probe(verifier, audit, batch, LR, 1)
        assert ok, why
        rogue.discard_trail()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_honest_moments_stay_inside_the_bound(dtype: torch.dtype) -> None:
    """Warmed up over rounds whose gradients are all clipped (early training: the raw norm is
    far above 1), where the first moment grows fastest."""
    honest = trainer(dtype)
    honest.set_audit(True)
    worst = 0.0
    for r in range(4):
        honest.train_step(batch_of(20 + r, samples=2 * H), step=r, lr=LR, prev_lr=LR,
                          prev_self_results=None, zero_optim=False)  # fmt: skip
        trail = honest.last_trail
        assert trail is not None
        shapes = list(honest.shapes)
        states = [decode_state(trail.read(h), shapes, start=honest.params if j == 0 else None)
                  for j, h in enumerate(trail.hashes)]  # fmt: skip
        worst = max(worst, moment_scale(states, len(shapes), 1.0))
        honest.discard_trail()
    assert 0.05 < worst <= 1.0 + MOMENT_SLACK / 5, worst


def test_the_scale_of_a_state() -> None:
    state = {"m.0": torch.tensor([3.0, 4.0]), "v.0": torch.tensor([0.25, 4.0]),
             "m.1": torch.zeros(0), "v.1": torch.zeros(0)}  # fmt: skip
    assert moment_scale([state], 2, 10.0) == pytest.approx(0.5)  # ‖m‖ = 5
    state["v.0"] = torch.tensor([0.25, 64.0])  # √v = 8 > 5
    assert moment_scale([state], 2, 10.0) == pytest.approx(0.8)
    assert moment_scale([state], 2, None) == 0.0  # no clip, no bound
    state["m.0"] = torch.tensor([math.nan, 0.0])
    assert moment_scale([state], 2, 10.0) == math.inf


def test_a_run_without_a_clip_bounds_nothing() -> None:
    rogue, verifier = trainer(), trainer()
    rogue.config = verifier.config = dataclasses.replace(rogue.config, clip_grad_norm=None)
    tilted(rogue, 3e3 * CLIP)  # far beyond what clipped gradients make, but nothing clips here
    batch = batch_of(3, samples=2 * H)
    payload, audit, served = _round(rogue, batch)
    ok, why = audit_link(verifier, 1, audit, served, batch, LR, payload)
    assert ok and "clip bound" not in why, why
    rogue.discard_trail()


def test_the_calibration_bench_runs(tmp_path: Path) -> None:
    """bench/sparseloco_audit.py (its tables are in bench/README.md) still runs on this code,
    and its verdicts are the ones those tables report: honest links hold on both thread counts,
    every-step riders, the swamp and the tilt fail every link, the tilt passes its probe."""
    path = Path(__file__).resolve().parents[3] / "bench" / "sparseloco_audit.py"
    spec = importlib.util.spec_from_file_location("bench_sparseloco_audit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "sla.json"
    args = ["--rounds", "1", "--inner-steps", "2", "--batch", "2", "--kernels", "", "--json"]
    assert module.main([*args, str(out)]) == 0
    links = json.loads(out.read_text())["links"]
    assert all(r["ok"] for k in ("honest", "honest@2", "probe honest") for r in links[k])
    for kind in ("fr2", "repeat", "swamp", "tilt"):
        assert links[kind] and not any(r["ok"] for r in links[kind]), kind
    assert links["tilt"][0]["scale"] == pytest.approx(3.0, rel=1e-3)
    assert all(r["ok"] for r in links["probe tilt"])
