"""How well a received payload matches the gradient a verifier recomputed from the same batch and
the same pre-round weights (docs/protocol.md, "Threat model and result verification").

A verifier cannot rebuild a trainer's payload: the payload is the top-k of the trainer's residual,
which carries the trainer's private history. It can check the payload's *direction*: the
**captured-mass score** is the share of the recomputed gradient's own top-k DCT mass that the
payload's chosen coefficients capture with the right sign,

    Σ σ·G[t, i] over the payload's (tile t, index i, sign σ)  /  Σ_t (top-k |G[t, ·]| of tile t)

summed over every tensor: about 0.1–0.65 for honest payloads, about 0 for random ones, negative
for flipped, cancelling or garbage-data updates. The score is a ratio, so the gradient's scale
(clipping, loss scaling, the learning rate) does not matter, and kernel rounding moves it by far
less than the margin between ``THRESHOLD`` and the honest scores.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from psyche.distro.compress import DistroResult, chunk_shape, totalk_of
from psyche.distro.dct import encode
from psyche.distro.payload import Payload

THRESHOLD = 0.05
"""A result scoring at or above this passes verification (a "match" vote). Calibrated on the tiny
model (issue 25): honest results ≥ 0.068 (whole batch ≥ 0.086) over 2 × 108 verifications at 1
and 2 torch threads, random payloads ≤ 0.033, every direction-changing attack ≤ 0.021."""

MISMATCH_BELOW = 0.025
"""A result scoring below this fails verification (a "mismatch" vote); between it and
``THRESHOLD`` the verifier does not decide and leaves the slot unchecked. An accusation ejects
the accused with a quorum, and the accuser when a quorum of matches outvotes it, so a verifier
accuses only on strong evidence: the daemon votes "mismatch" only on a gradient of half the
batch (``psyche.daemon.verifying.ESCALATE_SHARE``), where honest results scored no lower than
+0.079 and random payloads no higher than +0.030 at 8 samples per trainer, while one sample
scored honest results as low as −0.14 (bench/README.md, "Escalation"). Every
direction-changing attack scores below 0. A cheater that lands in the gap escapes that one
check, not the next."""

Z_THRESHOLD = 3.0
"""A result whose ``Score.z`` is below this fails ``Score.passed``. Not used by the daemon's
verdicts: measured on the tiny model at 1 of 8 samples recomputed (issue 25, bench/byzantine.py
``--calibration``), honest ``z`` fell to 1.99 (4 of 975 honest votes below 3.0) while random
payloads reached 2.35, so on sub-batches it separates no better than ``THRESHOLD`` on
``captured_mass``, which the daemon keeps."""


@torch.no_grad()
def captured_mass(payload: Payload, grads: Sequence[torch.Tensor], chunk: int) -> float:
    """The captured-mass score of ``payload`` against ``grads`` (one gradient per parameter, in
    the payload's parameter order, i.e. ascending parameter name); ``chunk`` is the run's
    ``compression_chunk``. 0 when the gradient is zero everywhere."""
    captured = 0.0
    mass = 0.0
    for result, tiles, picked in _chosen(payload, grads, chunk):
        signs = torch.sign(result.val.float()).to(tiles.device)
        captured += float((signs * picked).sum())
        mass += float(torch.topk(tiles.abs(), result.k, dim=-1).values.sum())
    return captured / mass if mass > 0 else 0.0


def _chosen(
    payload: Payload, grads: Sequence[torch.Tensor], chunk: int
) -> Iterator[tuple[DistroResult, torch.Tensor, torch.Tensor]]:
    """Per tensor: its payload result, the gradient's DCT tiles, and the tiles' coefficients at
    the payload's chosen indices (float32)."""
    if len(grads) != len(payload.results):
        raise ValueError(f"{len(grads)} gradients for a payload of {len(payload.results)} tensors")
    for result, grad in zip(payload.results, grads, strict=True):
        coeffs = encode(grad.detach().float(), chunk)
        if tuple(coeffs.shape) != tuple(result.xshape):
            raise ValueError(
                f"gradient encodes to {tuple(coeffs.shape)}, payload has {result.xshape}"
            )
        tiles = coeffs.reshape(*chunk_shape(result.xshape), totalk_of(result.xshape))
        yield result, tiles, torch.gather(tiles, -1, result.idx.to(tiles.device))


def verdict_on(captured: float) -> bool | None:
    """A verifier's vote on a captured-mass score: True (match) at or above ``THRESHOLD``, False
    (mismatch) below ``MISMATCH_BELOW``, None (undecided: the slot stays unchecked) between."""
    if captured >= THRESHOLD:
        return True
    if captured < MISMATCH_BELOW:
        return False
    return None


def passes(judged: float | Score) -> bool:
    """The verdict: a :class:`Score` passes by its ``z``; a bare float is a captured-mass score
    (the former measure, kept for callers that still compute it) held against ``THRESHOLD``."""
    if isinstance(judged, Score):
        return judged.passed
    return judged >= THRESHOLD


@dataclass(frozen=True, slots=True)
class Score:
    """The agreement of one payload with a recomputed gradient (see the module docstring)."""

    z: float
    """Whole payload: Σ σ·G over the chosen coefficients / √(Σ G²) over the same coefficients,
    in standard deviations of the random-sign null."""
    sign_z: float
    """Whole payload: (agreeing − disagreeing signs) / √(coefficients with G ≠ 0)."""
    captured: float
    """The captured-mass score of :func:`captured_mass`."""
    tensor_z: tuple[float, ...]
    """``z`` of each tensor, in the payload's order."""
    tensor_n: tuple[int, ...]
    """Chosen coefficients of each tensor where the gradient is not zero."""

    @property
    def passed(self) -> bool:
        return self.z >= Z_THRESHOLD


@torch.no_grad()
def score(payload: Payload, grads: Sequence[torch.Tensor], chunk: int) -> Score:
    """Score ``payload`` against ``grads`` (as :func:`captured_mass`); ``score(...).passed`` is
    the verdict a verifier sends."""
    s_all = v_all = agree = n_all = captured = mass = 0.0
    tensor_z: list[float] = []
    tensor_n: list[int] = []
    for result, tiles, chosen in _chosen(payload, grads, chunk):
        picked = chosen.double()
        signs = torch.sign(result.val.double()).to(tiles.device)
        s = float((signs * picked).sum())
        v = float((picked * picked).sum())
        n = int((picked != 0).sum())
        s_all += s
        v_all += v
        n_all += n
        agree += float((signs * torch.sign(picked)).sum())
        captured += s
        mass += float(torch.topk(tiles.abs(), result.k, dim=-1).values.sum())
        tensor_z.append(s / math.sqrt(v) if v > 0 else 0.0)
        tensor_n.append(n)
    return Score(
        z=s_all / math.sqrt(v_all) if v_all > 0 else 0.0,
        sign_z=agree / math.sqrt(n_all) if n_all > 0 else 0.0,
        captured=captured / mass if mass > 0 else 0.0,
        tensor_z=tuple(tensor_z),
        tensor_n=tuple(tensor_n),
    )
