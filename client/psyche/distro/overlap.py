"""Near-duplicate payloads: how much of one result another result repeats.

See docs/protocol.md, "Threat model and result verification" (copy checks). A free rider that
copies a peer's result and changes a few coefficients escapes the exact fingerprint; the
**signed overlap** catches it: the share of a payload's chosen coefficients — (tile, index, sign)
triples — that the other payload chose too, with the same sign,

    |A ∩ B| / |A|      (A, B: sets of (tensor, tile, index, sign); |A| = |B| = Σ tiles·k)

Templar's measure (arXiv 2505.21684) is the same overlap without the signs. Measured on the
tiny model (bench/byzantine.py; docs/protocol.md): honest results of different trainers share
at most ~0.1 of their coefficients once training has moved, a trainer's result and its own
previous one ~0.04, but in the first round trained from one shared initial model honest results
share up to 0.64 (every batch's gradient points the same way then). ``NEAR_DUPLICATE`` sits
above that: a copy is caught unless more than a quarter of its coefficients were changed, and
a copy changed that much is a worse update that the recompute verification then judges.
``repeated_tensors`` is the per-tensor form against the steady push on one weight matrix: a
tensor of at least ``REPEAT_MIN_TILES`` tiles whose coefficients and signs all repeat another
result's, which no honest pair did over the calibration.
"""

from __future__ import annotations

import torch

from psyche.distro.payload import Payload

NEAR_DUPLICATE = 0.75
"""Two results whose signed overlap is at least this are copies of each other."""

CLOSER = 0.5
"""Where a reference result of the copy's round is known, a near-duplicate must also be at least
this much closer to the original than to the reference: ``1 − o(a, b) ≤ CLOSER · (1 − o(a, ref))``.
Honest results of one round converge when every batch's gradient points the same way (the
first rounds from one model, large batches): at 160 samples per client the tiny model's honest
pairs share 0.88–0.91 of their choices in the first trained round, 0.75–0.80 in the second
(``docs/protocol.md``), so the absolute line alone refused honest results and ejected their
trainers. A copy stands out from such a round: it is near one result, not near all of them."""

REPEAT_MIN_TILES = 4
"""A tensor is checked for an exact repeat only from this many tiles on: with fewer (norm
weights, one tile of a small matrix) honest results repeat their few coefficients by chance."""


def signed_keys(idx: torch.Tensor, val: torch.Tensor, totalk: int) -> torch.Tensor:
    """One int64 per chosen coefficient of one tensor: tile number, index and sign together
    (also what ``psyche.distro.copy_index`` sketches)."""
    flat_idx = idx.reshape(-1, idx.shape[-1]).long()
    tile = torch.arange(flat_idx.shape[0], dtype=torch.int64).unsqueeze(-1)
    positive = (val.reshape(flat_idx.shape) > 0).long()
    return ((tile * totalk + flat_idx) * 2 + positive).reshape(-1)


def tensor_overlaps(a: Payload, b: Payload) -> tuple[float, ...]:
    """Per tensor, the share of ``a``'s chosen coefficients that ``b`` chose with the same sign
    (0 for a tensor whose shapes differ between the two)."""
    out = []
    for ra, rb in zip(a.results, b.results, strict=True):
        if ra.idx.shape != rb.idx.shape or ra.totalk != rb.totalk:
            out.append(0.0)
            continue
        ka = signed_keys(ra.idx, ra.val, ra.totalk)
        kb = signed_keys(rb.idx, rb.val, rb.totalk)
        out.append(float(torch.isin(ka, kb).sum()) / max(1, ka.numel()))
    return tuple(out)


def signed_overlap(a: Payload, b: Payload) -> float:
    """The share of all of ``a``'s chosen coefficients that ``b`` chose with the same sign."""
    sizes = [r.idx.numel() for r in a.results]
    total = sum(sizes)
    if total == 0 or len(a.results) != len(b.results):
        return 0.0
    shared = sum(o * n for o, n in zip(tensor_overlaps(a, b), sizes, strict=True))
    return shared / total


def repeated_tensors(a: Payload, b: Payload) -> list[int]:
    """Tensors of at least ``REPEAT_MIN_TILES`` tiles whose chosen coefficients and signs are
    all in both results (in any order)."""
    out = []
    for n, (ra, overlap) in enumerate(zip(a.results, tensor_overlaps(a, b), strict=True)):
        if ra.idx.numel() // max(1, ra.k) >= REPEAT_MIN_TILES and overlap == 1.0:
            out.append(n)
    return out


def repeat_counts(to_reference: float) -> bool:
    """Whether a tensor repeated exactly from another result is evidence of a copy, given the
    share ``to_reference`` of its coefficients that a reference result of the round chose too: not
    where the round's results agree on that tensor anyway (``NEAR_DUPLICATE`` or more). At 440
    samples of 128 tokens per client the tiny model's honest results shared 0.92–0.94 of their
    choices in the first trained round, and two of the six pairs repeated a large tensor exactly
    while another result differed from it in a few coefficients: "repeated unless the
    reference repeats it too" refused a third of the honest (copy, original, reference) triples
    (bench/honest_overlap.py). A tensor pushed or copied into a result whose own would differ
    stays far from the reference's and still counts."""
    return to_reference < NEAR_DUPLICATE


def closer_than_reference(to_original: float, to_reference: float) -> bool:
    """Whether a result with signed overlap ``to_original`` with a held result and
    ``to_reference`` with a reference result of its round is near that one result rather than
    near the round's results alike (``CLOSER``)."""
    return 1.0 - to_original <= CLOSER * (1.0 - to_reference)


def near_duplicate(a: Payload, b: Payload, ref: Payload | None = None) -> bool:
    """Whether ``a`` is refused as a copy of ``b``: its signed overlap reaches
    ``NEAR_DUPLICATE``, or one of its large tensors repeats ``b``'s exactly. Given ``ref``, a
    result of ``a``'s round other than ``b``, the overlap must also be ``CLOSER`` to ``b`` than
    to ``ref``, and a repeated tensor counts only where ``a``'s tensor is not near ``ref``'s
    (:func:`repeat_counts`)."""
    if len(a.results) != len(b.results):
        return False
    o = signed_overlap(a, b)
    if o >= NEAR_DUPLICATE and (ref is None or closer_than_reference(o, signed_overlap(a, ref))):
        return True
    repeats = repeated_tensors(a, b)
    if repeats and ref is not None and len(ref.results) == len(a.results):
        to_ref = tensor_overlaps(a, ref)
        repeats = [n for n in repeats if repeat_counts(to_ref[n])]
    return bool(repeats)
