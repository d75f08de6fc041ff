"""A SparseLoCo trainer cannot skip the gradient by committing moments that round it away.

The inner AdamW moments a trainer starts a round from are its own (nothing binds them to the last
round's), so until 2026-12-06 a trainer could commit moments of 1e8 and compute nothing: AdamW then
rounds any gradient away, a verifier's replay from those states landed exactly where the trainer
committed, and every link and the probe passed while the trainer chose its update's direction
freely. Each replay now also measures how much of its own gradient its first moment lost
(``audit_compare.hidden_share``): rounding only for an honest state, all of it for a swamped one.
"""

from __future__ import annotations

import math

import pytest
import torch

from psyche.daemon.sparseloco_checks import audit_link, audit_probe
from psyche.distro.audit_probe import probe_positions
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training import init_model, llama_config
from psyche.training.audit_compare import HIDDEN_LIMIT, TOLERANCE, hidden_share
from psyche.training.sparseloco_audit import AuditTrail, decode_state, inner_batches, replay_link
from psyche.training.sparseloco_probe import replay_probe
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

from .helpers import TINY, batch_of

H = 3
LR = 4e-3


def trainer(dtype: torch.dtype = torch.float32) -> SparseLoCoTrainer:
    config = SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, clip_grad_norm=1.0, inner_steps=H,
        outer_lr=0.7, outer_momentum=0.0, topk_chunk=64, topk=2, value_bits=2, error_decay=0.95,
    )  # fmt: skip
    model = init_model(llama_config(TINY), seed=0).to(dtype)
    return SparseLoCoTrainer(model, config, micro_batch_size=2)


def swamped(t: SparseLoCoTrainer) -> list[int]:
    """Moments a million times an honest one's, in a direction of the trainer's choosing, and
    no forward or backward (its calls counted)."""
    g = torch.Generator().manual_seed(5)
    for p in t.params:
        t._inner.state[p] = {
            "step": torch.tensor(100.0),
            "exp_avg": (1e8 * torch.randn(p.shape, generator=g)).to(p.dtype),
            "exp_avg_sq": torch.full(p.shape, 1e16, dtype=p.dtype),
        }
    calls = [0]

    def no_work(batch: torch.Tensor, cancel: object) -> float:
        calls[0] += 1
        for p in t.params:
            p.grad = torch.zeros_like(p)
        return 0.0

    t._backward = no_work  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_swamped_chain_fails_every_link_and_its_probe(dtype: torch.dtype) -> None:
    rogue, verifier = trainer(dtype), trainer(dtype)
    calls = swamped(rogue)
    batch = batch_of(1, samples=2 * H)
    rogue.set_audit(True)
    out = rogue.train_step(batch, step=1, lr=LR, prev_lr=LR, prev_self_results=None,
                           zero_optim=False)  # fmt: skip
    trail = rogue.last_trail
    assert trail is not None and calls[0] == H  # no gradient was ever computed
    decoded = rogue.format.decode(out.payload)
    assert decoded.audit is not None
    shapes, parts = list(verifier.shapes), inner_batches(batch, H)
    for j in range(H):
        start = verifier.params if j == 0 else None
        before = decode_state(trail.read(trail.hashes[j]), shapes, trail.hashes[j], start=start)
        after = decode_state(trail.read(trail.hashes[j + 1]), shapes, trail.hashes[j + 1])
        v = replay_link(verifier, j, before, after, parts[j], LR)
        # What the check was blind to: the replay lands where the rogue committed.
        assert v.step_ok and max(v.weight_error, v.moment_error) <= TOLERANCE, v
        assert v.hidden > 100 * HIDDEN_LIMIT and not v.ok, v
    served = {h: trail.read(h) for h in (*trail.hashes, *trail.error_hashes)}
    ok, why = audit_link(verifier, 1, decoded.audit, served, batch, LR,
                         out.payload[: rogue.payload_bytes])  # fmt: skip
    assert not ok and "of the gradient hidden" in why, why
    ok, why = audit_probe(verifier, decoded.audit, batch, LR, 1)
    assert not ok and "of the gradient hidden" in why, why
    rogue.discard_trail()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_honest_chain_hides_only_rounding(dtype: torch.dtype) -> None:
    """Warmed-up moments (two rounds before), every link and the probe at 1 and 2 threads."""
    honest, verifier = trainer(dtype), trainer(dtype)
    for warm in (7, 8):
        honest.train_round(batch_of(warm, samples=2 * H), step=warm, lr=LR)
    batch = batch_of(1, samples=2 * H)
    at = probe_positions(honest.shapes, 3)
    trail = AuditTrail(probe_at=at)
    honest.train_round(batch, step=3, lr=LR, trail=trail)
    shapes, parts = list(verifier.shapes), inner_batches(batch, H)
    limit = 1e-5 if dtype == torch.float32 else HIDDEN_LIMIT / 2
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for j in range(H):
                before = decode_state(
                    trail.states[j], shapes, start=verifier.params if j == 0 else None
                )
                after = decode_state(trail.states[j + 1], shapes)
                v = replay_link(verifier, j, before, after, parts[j], LR)
                assert v.ok and v.hidden < limit, v
            v = replay_probe(verifier, trail.probe(), at, parts[0], LR)
            assert v.ok and v.hidden < limit, v
    finally:
        torch.set_num_threads(1)


def test_a_zero_gradient_shows_nothing() -> None:
    """A state whose gradient is exactly zero (all-zero weights give one) proves no work."""
    state = {"m.0": torch.zeros(4)}
    assert hidden_share(state, state, [torch.zeros(4)], 0.9) == math.inf
    assert hidden_share(state, state, [None], 0.9) == math.inf
    g = torch.tensor([1.0, -2.0, 0.5, 0.0])
    assert hidden_share({"m.0": 0.1 * g}, state, [g], 0.9) == pytest.approx(0.0, abs=1e-7)
    assert hidden_share({"m.0": torch.zeros(4)}, state, [g], 0.9) == pytest.approx(1.0)
