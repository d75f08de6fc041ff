"""The apply's agreement filter (psyche.distro.agreement): a result whose signs point against the
rest of its round is left out, honest-like results stay, two results never judge each other, a
negated copy of a peer's result takes only itself out, and the integer measure is the pairwise
sum it stands for (computed here the slow way)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from psyche.distro import DistroResult, Payload, agreement
from psyche.distro.agreement import MIN_RESULTS, net_agreements, opposed

SHAPES = ((16, 64), (8, 128))
"""Two tensors: (tiles, coefficients per tile), each result choosing K_CHOSEN per tile."""
K_CHOSEN = 16


def payload(gen: torch.Generator, direction: list[torch.Tensor], noise: float) -> Payload:
    """A result choosing K_CHOSEN coefficients per tile at random, each signed as ``direction``
    except a ``noise`` share of them."""
    results = []
    for (tiles, totalk), d in zip(SHAPES, direction, strict=True):
        idx = torch.rand((tiles, totalk), generator=gen).argsort(dim=-1)[:, :K_CHOSEN]
        sign = d.gather(1, idx)
        flip = torch.rand(sign.shape, generator=gen) < noise
        val = torch.where(flip, -sign, sign)
        results.append(DistroResult(idx, val, torch.Size((tiles, totalk)), totalk))
    return Payload(0, 0, 1, 0, True, tuple(results))


def flipped(p: Payload) -> Payload:
    res = tuple(DistroResult(r.idx, -r.val, r.xshape, r.totalk) for r in p.results)
    return Payload(p.step, p.batch_start, p.batch_end, p.trainer_nonce, p.quantized, res)


def direction(gen: torch.Generator) -> list[torch.Tensor]:
    return [torch.where(torch.rand(s, generator=gen) < 0.5, 1.0, -1.0) for s in SHAPES]


def slow_net(payloads: list[Payload], n: int) -> int:
    """Σ over the others of the signed dot product of payload ``n`` with each (a pair loop)."""
    total = 0
    for m, other in enumerate(payloads):
        if m == n:
            continue
        for a, b in zip(payloads[n].results, other.results, strict=True):
            for tile in range(a.idx.shape[0]):
                mine = dict(zip(a.idx[tile].tolist(), a.val[tile].tolist(), strict=True))
                for i, v in zip(b.idx[tile].tolist(), b.val[tile].tolist(), strict=True):
                    if i in mine:
                        total += int(torch.sign(torch.tensor(mine[i] * v)))
    return total


def test_a_flipped_result_among_honest_ones_is_left_out() -> None:
    gen = torch.Generator().manual_seed(0)
    d = direction(gen)
    honest = [payload(gen, d, 0.2) for _ in range(3)]
    rogue = flipped(payload(gen, d, 0.2))  # its own honest result, every sign flipped
    for at in range(4):
        assert opposed([*honest[:at], rogue, *honest[at:]]) == [at]


def test_the_negation_of_a_peers_result_takes_only_itself_out() -> None:
    """Against all the others, the honest result and its negated copy both point down (they
    cancel, and the copy outweighs the rest of a small round); against the round's upper half,
    only the copy does."""
    gen = torch.Generator().manual_seed(4)
    d = direction(gen)
    honest = [payload(gen, d, 0.3) for _ in range(3)]
    round_ = [*honest, flipped(honest[1])]
    assert [net < 0 for net, _ in net_agreements(round_)] == [False, True, False, True]
    assert opposed(round_) == [3]


def test_three_results_one_flipped() -> None:
    """At three, an honest result's net against the other honest one and the flipper is near
    zero, and both honest ones may be below it; the upper half is the two honest ones."""
    gen = torch.Generator().manual_seed(5)
    d = direction(gen)
    for _ in range(20):
        round_ = [payload(gen, d, 0.3), payload(gen, d, 0.3), flipped(payload(gen, d, 0.3))]
        assert opposed(round_) == [2]


def test_honest_results_that_agree_on_balance_all_stay() -> None:
    gen = torch.Generator().manual_seed(1)
    d = direction(gen)
    assert opposed([payload(gen, d, 0.3) for _ in range(8)]) == []


def test_two_results_never_leave_each_other_out() -> None:
    gen = torch.Generator().manual_seed(2)
    d = direction(gen)
    a = payload(gen, d, 0.0)
    assert net_agreements([a, flipped(a)])[0][0] < 0
    assert MIN_RESULTS == 3 and opposed([a, flipped(a)]) == []


def test_two_flipped_among_eight_are_both_left_out() -> None:
    gen = torch.Generator().manual_seed(3)
    d = direction(gen)
    honest = [payload(gen, d, 0.25) for _ in range(6)]
    rogues = [flipped(payload(gen, d, 0.25)) for _ in range(2)]
    round_ = [*honest[:3], rogues[0], *honest[3:], rogues[1]]
    assert opposed(round_) == [3, 7]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, 6), noise=st.floats(0.0, 1.0))
def test_the_net_is_the_pairwise_sum_and_follows_the_payloads_order(
    seed: int, k: int, noise: float
) -> None:
    gen = torch.Generator().manual_seed(seed)
    d = direction(gen)
    payloads = [payload(gen, d, noise) for _ in range(k)]
    nets = net_agreements(payloads)
    chosen = sum(t * K_CHOSEN for t, _ in SHAPES)
    assert nets == [(slow_net(payloads, n), chosen) for n in range(k)]
    order = torch.randperm(k, generator=gen).tolist()
    assert net_agreements([payloads[i] for i in order]) == [nets[i] for i in order]


def test_windows_smaller_than_a_tensor_give_the_same_nets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor summed a few tiles at a time (as a large embedding is) gives the nets of one
    buffer for the whole tensor, and the same results left out."""
    gen = torch.Generator().manual_seed(6)
    d = direction(gen)
    round_ = [payload(gen, d, 0.3) for _ in range(4)] + [flipped(payload(gen, d, 0.3))]
    whole, out = net_agreements(round_), opposed(round_)
    for window in (64, 128, 3 * 128, 1000):  # one tile of a tensor at a time … uneven splits
        monkeypatch.setattr(agreement, "WINDOW", window)
        assert net_agreements(round_) == whole
        assert opposed(round_) == out == [4]
