"""Agreement: whether a DisTrO result points with the rest of its round or against it.

The apply's filter (docs/protocol.md, "Results that point against the round"). Verification
catches a result that does not follow from its trainer's batch, but only once a sampled verifier
has judged it, a round after it arrived; until then a sign-flipped or cancelling result is
applied and moves every honest client's weights the wrong way (bench/README.md: 1.093× the
all-honest loss undefended, 1.027× at one seed even with verification at 50 %). Such a result
disagrees with the others of its round, which an honest result does not: gradients of one model
on different batches point, on balance, the same way.

The measure, per result r of a round's K results (each a set of (tensor, tile, index) with a
sign s ∈ {−1, +1}; S the sum of all K results' signs per coefficient):

    net(r) = Σ over r's coefficients of s · (S − s)      (r's signs against the others' sum)

an integer, so every client computes the same value whatever its hardware, and it costs one
scatter of the round's chosen coefficients into a buffer of at most ``WINDOW`` coefficients and
one gather per result (a second time in a round with a negative net): linear in the results, no
loop over pairs. ``opposed`` leaves out, once the round has at least ``MIN_RESULTS`` results, every
result whose net is negative against all the others and against the round's upper half by net
(two looks; see there why). With honest results of mean pairwise agreement d > 0 in the
majority, the upper half is honest, an honest result's net against it is ∝ +d and an opposed
one's ∝ −d; at two results nobody can tell which is wrong, and both stay.

Measured (bench/byzantine.py, tiny model, 4 clients, 40 steps): honest results' net per
coefficient and other result fell from 0.33 to 0.012, never below 0; a sign-flipped one's from
−1.0 to −0.04. The filter does not judge and ejects nobody: the left-out result's trainer is still
paid unless a verifier rejects it. Its limits are in the docs (a random result, net near zero,
may pass; an honest one may be left out where honest results stop agreeing on balance).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from psyche.distro.compress import DistroResult
from psyche.distro.payload import Payload

__all__ = ["MIN_RESULTS", "WINDOW", "net_agreements", "opposed"]

MIN_RESULTS = 3
"""Fewest results of a round for the filter to leave any out (two results disagreeing say
nothing about which of them is wrong)."""


WINDOW = 1 << 24
"""Coefficients of one tensor summed at a time (64 MiB of float32), as the apply's windows: the
largest embedding of a large model would otherwise need a buffer of its whole size."""


def net_agreements(
    payloads: Sequence[Payload], against: Sequence[bool] | None = None
) -> list[tuple[int, int]]:
    """Per payload, ``(net, chosen)``: its signs against the sum of the others' on the
    coefficients it chose (the module docstring's ``net``) and how many coefficients it chose.
    With ``against``, the sum is over the others marked True only.

    The payloads are one round's, validated against one spec (same tensors, tiles and k). Summed
    tensor by tensor and window by window (tiles of at most ``WINDOW`` coefficients) in a dense
    buffer, then each result's signs against it; results are stacked in groups of at most
    ``WINDOW`` chosen coefficients, so that nothing the size of the round's payloads is copied.
    In float32, exactly: every value is an integer of magnitude at most K, and the per-result
    sums are taken in float64 (exact below 2^53)."""
    count = len(payloads)
    weight = torch.ones(count, dtype=torch.float32)
    if against is not None:
        weight = torch.tensor([float(a) for a in against], dtype=torch.float32)
    net = torch.zeros(count, dtype=torch.float64)
    chosen = 0
    for t in range(len(payloads[0].results) if count else 0):
        results = [p.results[t] for p in payloads]
        k, totalk = results[0].idx.shape[-1], results[0].totalk
        tiles = results[0].idx.numel() // k
        span = max(1, WINDOW // totalk)
        for start in range(0, tiles, span):
            end = min(tiles, start + span)
            group = max(1, WINDOW // ((end - start) * k))
            groups = [slice(g, min(count, g + group)) for g in range(0, count, group)]
            total = torch.zeros((end - start) * totalk, dtype=torch.float32)
            # One group (the usual case) is stacked once; more are stacked again for the
            # gathers rather than held, to keep the memory bound.
            kept = _stacked(results, k, totalk, start, end) if len(groups) == 1 else None
            for g in groups:
                keys, signs = kept or _stacked(results[g], k, totalk, start, end)
                weighted = signs if against is None else signs * weight[g, None]
                total.index_add_(0, keys.reshape(-1), weighted.reshape(-1))
            for g in groups:
                keys, signs = kept or _stacked(results[g], k, totalk, start, end)
                net[g] += (signs * total[keys]).sum(dim=1, dtype=torch.float64)
                # Its own signs are in the sum with its weight w: s·w·s = w·|s|.
                net[g] -= weight[g] * torch.count_nonzero(signs, dim=1)
        chosen += tiles * k
    return [(round(n), chosen) for n in net.tolist()]


def opposed(payloads: Sequence[Payload]) -> list[int]:
    """Positions in ``payloads`` of the results the apply leaves out, when there are at least
    ``MIN_RESULTS``: those whose net agreement is negative against all the others and also
    against the round's upper half (the ⌈K/2⌉ results of the highest net against all the
    others; ties to the earlier position).

    Against all the others, honest results are pulled towards zero by the opposed ones: at three
    results with one flipped, an honest result's net is about d − d = 0 and may be negative; a
    negated copy of one honest result takes that result's net far below zero along with its own.
    The upper half is honest while honest results are the majority, and against it only the
    opposed results point down. A round where no result is negative against all the others (an
    honest round) takes one look."""
    count = len(payloads)
    if count < MIN_RESULTS:
        return []
    first = [net for net, _ in net_agreements(payloads)]
    if min(first) >= 0:
        return []
    upper = set(sorted(range(count), key=lambda i: (-first[i], i))[: (count + 1) // 2])
    second = net_agreements(payloads, [i in upper for i in range(count)])
    return [i for i, (net, _) in enumerate(second) if net < 0 and first[i] < 0]


def _stacked(
    results: Sequence[DistroResult], k: int, totalk: int, start: int, end: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chosen coefficients of tiles ``start … end`` of one tensor, one row per result: their
    positions in the window's buffer (int64) and their signs (float32 ±1, 0 for a zero value)."""
    rows = torch.stack([r.idx.reshape(-1, k)[start:end] for r in results]).long()
    rows.add_(torch.arange(end - start, dtype=torch.int64).mul_(totalk).unsqueeze(-1))
    vals = torch.stack([r.val.reshape(-1, k)[start:end] for r in results])
    return rows.reshape(len(results), -1), vals.to(torch.float32).sign_().reshape(len(results), -1)
