"""Near-duplicate results (psyche.distro.overlap): honest results of different trainers and
rounds share few coefficients; a copy with a tenth of its coefficients changed, or a result
that repeats one large tensor exactly (the steady push), is caught (docs/protocol.md, "Threat
model and result verification")."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from psyche.distro import (
    Distro,
    DistroConfig,
    DistroResult,
    Payload,
    decode_payload,
    encode_payload,
)
from psyche.distro.overlap import (
    NEAR_DUPLICATE,
    near_duplicate,
    repeated_tensors,
    signed_overlap,
    tensor_overlaps,
)
from psyche.training import init_model, llama_config

from ..training.helpers import TINY, batch_of

CFG = DistroConfig(
    compression_decay=0.999, compression_topk=8, compression_chunk=64, quantize_1bit=True
)


@pytest.fixture(scope="module")
def rounds() -> list[list[Payload]]:
    """Wire-decoded payloads of 3 honest trainers over 4 rounds, each applying all of them."""
    torch.manual_seed(0)
    models = [init_model(llama_config(TINY), seed=0) for _ in range(3)]
    distros = [Distro(m.named_parameters(), CFG) for m in models]
    spec = distros[0].payload_spec
    prev: list[Payload | None] = [None] * 3
    out = []
    for r in range(4):
        sent = []
        for i, (m, d) in enumerate(zip(models, distros, strict=True)):
            tokens = batch_of(100 * r + i)
            m.zero_grad(set_to_none=True)
            m(input_ids=tokens, labels=tokens, use_cache=False).loss.backward()
            p = d.generate(1e-3, 1e-3, prev[i], step=r)
            prev[i] = p
            sent.append(decode_payload(encode_payload(p, spec.version), spec))
        for d in distros:
            d.apply(sent, 1e-3)
        out.append(sent)
    return out


def perturbed(p: Payload, share: float, g: torch.Generator) -> Payload:
    """``p`` with ``share`` of its coefficients moved to another index or sign-flipped."""
    res = []
    for r in p.results:
        idx, val = r.idx.clone(), r.val.clone()
        hit = torch.rand(idx.shape, generator=g) < share
        flip = torch.rand(idx.shape, generator=g) < 0.5
        val = torch.where(hit & flip, -val, val)
        moved = (idx + 1 + torch.randint(0, r.totalk - 1, idx.shape, generator=g)) % r.totalk
        idx = torch.where(hit & ~flip, moved, idx)
        res.append(DistroResult(idx, val, r.xshape, r.totalk))
    return dataclasses.replace(p, step=p.step + 1, trainer_nonce=7, results=tuple(res))


def test_honest_results_are_not_near_duplicates(rounds: list[list[Payload]]) -> None:
    flat = [(r, i, p) for r, sent in enumerate(rounds[1:], 1) for i, p in enumerate(sent)]
    for r, i, a in flat:
        for s, j, b in flat:
            if (r, i) != (s, j) and abs(r - s) <= 1:
                assert signed_overlap(a, b) < NEAR_DUPLICATE / 2, (r, i, s, j)
                assert not near_duplicate(a, b), (r, i, s, j)


def test_perturbed_copies_are_near_duplicates(rounds: list[list[Payload]]) -> None:
    g = torch.Generator().manual_seed(3)
    original = rounds[2][0]
    assert signed_overlap(original, original) == 1.0
    for share in (0.01, 0.1, 0.2):
        copy = perturbed(original, share, g)
        assert near_duplicate(copy, original), share
        assert signed_overlap(copy, original) == pytest.approx(1 - share, abs=0.05)
    assert not near_duplicate(perturbed(original, 0.5, g), original)


def test_a_repeated_large_tensor_is_caught(rounds: list[list[Payload]]) -> None:
    """The steady push: one matrix's coefficients the same in two rounds, the rest honest."""
    a, b = rounds[2][1], rounds[3][1]
    big = max(range(len(a.results)), key=lambda n: a.results[n].idx.numel())
    pushed = list(b.results)
    pushed[big] = a.results[big]
    push = dataclasses.replace(b, results=tuple(pushed))
    assert tensor_overlaps(push, a)[big] == 1.0
    assert repeated_tensors(push, a) == [big]
    assert near_duplicate(push, a)
    # A one-tile tensor repeating is below the floor: small tensors may repeat honestly.
    small = min(range(len(a.results)), key=lambda n: a.results[n].idx.numel())
    pushed = list(b.results)
    pushed[small] = a.results[small]
    assert repeated_tensors(dataclasses.replace(b, results=tuple(pushed)), a) == []
