"""The captured-mass score (psyche.distro.similarity): an honest payload passes against the
gradient a verifier recomputes from the same batch and pre-round weights; flipped, random and
garbage-data payloads fail (docs/protocol.md, "Threat model and result verification")."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest
import torch

from psyche.distro import Distro, DistroConfig, DistroResult, Payload
from psyche.distro.similarity import (
    MISMATCH_BELOW,
    THRESHOLD,
    Score,
    captured_mass,
    passes,
    score,
    verdict_on,
)
from psyche.training import init_model, llama_config

from ..training.helpers import TINY

CFG = DistroConfig(
    compression_decay=0.999,
    compression_topk=8,
    compression_chunk=64,
    quantize_1bit=True,
    clip_grad_norm=1.0,
)
STEPS = 8
T = TypeVar("T")
LR = 3e-3


def structured_batch(step: int, samples: int = 4, seq: int = 32) -> torch.Tensor:
    """A learnable toy language: each token determines the next (t → 7t + 3 mod 200)."""
    g = torch.Generator().manual_seed(step)
    rows = []
    for start in torch.randint(0, 200, (samples,), generator=g).tolist():
        row, t = [], start
        for _ in range(seq):
            row.append(t + 3)
            t = (7 * t + 3) % 200
        rows.append(row)
    return torch.tensor(rows)


def gradients(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(input_ids=tokens, labels=tokens, use_cache=False).loss.backward()
    return [p.grad.detach().clone() for _, p in sorted(model.named_parameters())]  # type: ignore[union-attr]


def flipped(p: Payload) -> Payload:
    res = tuple(DistroResult(r.idx, -r.val, r.xshape, r.totalk) for r in p.results)
    return Payload(p.step, p.batch_start, p.batch_end, p.trainer_nonce, p.quantized, res)


def random_like(p: Payload, g: torch.Generator) -> Payload:
    res = []
    for r in p.results:
        keys = torch.rand((*r.idx.shape[:-1], r.totalk), generator=g)
        idx = keys.argsort(dim=-1)[..., : r.k]
        val = torch.where(torch.rand(r.val.shape, generator=g) < 0.5, 1.0, -1.0)
        res.append(DistroResult(idx, val, r.xshape, r.totalk))
    return Payload(p.step, p.batch_start, p.batch_end, p.trainer_nonce, p.quantized, tuple(res))


@pytest.fixture(scope="module")
def judged() -> dict[str, list[Score]]:
    """Every payload of ``scores`` judged with :func:`score` (the verdict's measure)."""
    return _run(score)


@pytest.fixture(scope="module")
def scores() -> dict[str, list[float]]:
    return _run(captured_mass)


def _run(measure: Callable[[Payload, Sequence[torch.Tensor], int], T]) -> dict[str, list[T]]:
    torch.manual_seed(0)
    model = init_model(llama_config(TINY), seed=0)
    distro = Distro(model.named_parameters(), CFG)
    gen = torch.Generator().manual_seed(1)
    out: dict[str, list[T]] = {"honest": [], "flipped": [], "random": [], "garbage": []}
    prev: Payload | None = None
    for step in range(STEPS):
        tokens = structured_batch(step)
        verifier = copy.deepcopy(model)  # the pre-round weights every client holds
        model.zero_grad(set_to_none=True)
        model(input_ids=tokens, labels=tokens, use_cache=False).loss.backward()
        payload = distro.generate(LR, LR, prev, step=step)
        prev = payload
        distro.apply([payload], LR)
        grads = gradients(verifier, tokens)
        if step == 0:
            continue
        out["honest"].append(measure(payload, grads, CFG.compression_chunk))
        out["flipped"].append(measure(flipped(payload), grads, CFG.compression_chunk))
        out["random"].append(measure(random_like(payload, gen), grads, 64))
        cheat = copy.deepcopy(verifier)
        junk = torch.randint(3, 259, tokens.shape, generator=gen)
        cheat_distro = Distro(cheat.named_parameters(), CFG)
        cheat(input_ids=junk, labels=junk, use_cache=False).loss.backward()
        fake = cheat_distro.generate(LR, LR, None, step=step)
        out["garbage"].append(measure(fake, grads, CFG.compression_chunk))
    return out


def test_honest_payloads_pass(scores: dict[str, list[float]]) -> None:
    assert all(passes(s) for s in scores["honest"]), scores["honest"]


@pytest.mark.parametrize("attack", ["flipped", "random", "garbage"])
def test_attacks_fail(scores: dict[str, list[float]], attack: str) -> None:
    assert not any(passes(s) for s in scores[attack]), scores[attack]


def test_score_is_scale_free_and_checks_shapes() -> None:
    model = init_model(llama_config(TINY), seed=0)
    distro = Distro(model.named_parameters(), CFG)
    tokens = structured_batch(0)
    grads = gradients(model, tokens)
    for p, g in zip(sorted(model.named_parameters()), grads, strict=True):
        p[1].grad = g.clone()
    payload = distro.generate(LR, LR, None)
    one = captured_mass(payload, grads, 64)
    assert one == pytest.approx(captured_mass(payload, [g * 1e-3 for g in grads], 64), rel=1e-5)
    assert one > THRESHOLD
    with pytest.raises(ValueError, match="gradients"):
        captured_mass(payload, grads[:-1], 64)


def test_score_passes_honest_and_fails_attacks(judged: dict[str, list[Score]]) -> None:
    assert all(s.passed for s in judged["honest"]), [s.z for s in judged["honest"]]
    for attack in ("flipped", "random", "garbage"):
        assert not any(s.passed for s in judged[attack]), (attack, [s.z for s in judged[attack]])


def test_random_signs_have_the_standard_null() -> None:
    """With signs independent of the gradient, ``z`` has mean 0 and standard deviation 1 (so
    ``Z_THRESHOLD`` is in standard deviations: P(z ≥ t) ≤ exp(−t²/2), Hoeffding)."""
    model = init_model(llama_config(TINY), seed=0)
    distro = Distro(model.named_parameters(), CFG)
    grads = gradients(model, structured_batch(0))
    for p, g in zip(sorted(model.named_parameters()), grads, strict=True):
        p[1].grad = g.clone()
    honest = distro.generate(LR, LR, None)
    gen = torch.Generator().manual_seed(5)
    zs = torch.tensor([score(random_like(honest, gen), grads, 64).z for _ in range(100)])
    assert abs(float(zs.mean())) < 0.3 and 0.7 < float(zs.std()) < 1.3, zs
    assert float(zs.max()) < 4.0
    one = score(honest, grads, 64)
    assert one.passed and one.z > 10
    assert score(honest, [g * 1e-3 for g in grads], 64).z == pytest.approx(one.z, rel=1e-5)
    assert len(one.tensor_z) == len(grads) and all(n > 0 for n in one.tensor_n)


def test_verdict_on_leaves_the_gap_undecided() -> None:
    """A verifier accuses only well below the honest tail: between ``MISMATCH_BELOW`` and
    ``THRESHOLD`` it casts no vote (the slot stays unchecked)."""
    assert 0 < MISMATCH_BELOW < THRESHOLD
    assert verdict_on(THRESHOLD) is True and verdict_on(0.4) is True
    assert verdict_on(0.0496) is None  # the lowest honest score measured at 1 of 8 samples
    assert verdict_on((MISMATCH_BELOW + THRESHOLD) / 2) is None
    assert verdict_on(MISMATCH_BELOW) is None
    assert verdict_on(0.005) is False and verdict_on(-0.4) is False  # random, flipped


def test_captured_mass_votes_on_the_calibration(scores: dict[str, list[float]]) -> None:
    assert all(verdict_on(s) is True for s in scores["honest"]), scores["honest"]
    for attack in ("flipped", "garbage"):
        assert all(verdict_on(s) is False for s in scores[attack]), scores[attack]
