"""Per-sample gradient commitments: evidence that a DisTrO result was computed from every sample.

Issue 39 item 1 (docs/protocol.md, "Free riders: per-sample commitments"). A free rider trains
on part of its batch and reports the whole: its result still points the right way, and no
statistic of the result tells it apart (bench/README.md, "Free riders: can a verifier tell?").
So the trainer also commits, per micro-batch, to a small fingerprint of that micro-batch's own
gradient: ``PROJECTIONS`` seeded ±1 projections of the gradient's values at ``COORDS``
coordinates spread over all tensors. The coordinates and signs come from the step alone
(:func:`probe_seed`), so every verifier derives the same :class:`Probe`. A verifier that
recomputes a seed-chosen sample compares its fingerprint with the committed one
(:func:`agreement`, a cosine); a trainer that skipped the sample has to commit to something it
did not compute, and another sample's fingerprint, the mean of those it computed or random
numbers all score far below an honest one (bench/free_rider_commitments.py).

The fingerprint is of the micro-batch's *mean-loss* gradient (the accumulated ``.grad``'s change
over the micro-batch, times the number of micro-batches), so its scale does not depend on how the
batch was split; the cosine ignores scale anyway.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "COORDS",
    "MATCH_THRESHOLD",
    "MAX_GROUPS",
    "NO_LOOKAHEAD",
    "PROJECTIONS",
    "MicroBatchFingerprints",
    "Probe",
    "SampleCommitments",
    "agreement",
    "probe_seed",
]

COORDS = 4096
"""Gradient coordinates a fingerprint is made of, spread over the tensors by size."""
PROJECTIONS = 32
"""Values per fingerprint: seeded ±1 projections of the ``COORDS`` values (64 bytes in f16)."""
MATCH_THRESHOLD = 0.999
"""Least cosine between a committed and a recomputed fingerprint that counts as a match. At the
exact point, 1,128 honest comparisons on the tiny model (1 and 2 torch threads, micro-batches of
1 and 2, f16 on the wire) agreed to 1.000000; the best fake for a skipped sample reached 0.990
(another sample's of the same batch) and 0.990 (the mean of the whole batch's, which takes the
whole compute): bench/README.md, "Per-sample commitments"."""
MAX_GROUPS = 1024
"""Most fingerprints a payload may carry (bounds its size; a batch of more samples needs
micro-batches of more than one)."""
NO_LOOKAHEAD = bytes(32)
_DOMAIN = b"psyche-sample-commit-v1"


def probe_seed(step: int) -> bytes:
    """The public seed of a step's probe: known to the trainer while it trains (it needs the
    coordinates), which is harmless: knowing them saves no forward or backward pass."""
    return hashlib.sha256(_DOMAIN + step.to_bytes(8, "little")).digest()


def _generator(seed: bytes, what: bytes) -> torch.Generator:
    key = int.from_bytes(hashlib.sha256(seed + what).digest()[:8], "little") & ((1 << 63) - 1)
    return torch.Generator().manual_seed(key)


@dataclass(frozen=True, slots=True)
class Probe:
    """Which gradient coordinates (per tensor, flat, in the payload's ascending-name order) and
    which ±1 projections make a fingerprint."""

    indices: tuple[torch.Tensor, ...]
    signs: torch.Tensor
    """``[PROJECTIONS, Σ len(indices)]`` of ±1, float32."""

    @classmethod
    def for_shapes(
        cls,
        shapes: Sequence[Sequence[int]],
        seed: bytes,
        coords: int = COORDS,
        projections: int = PROJECTIONS,
    ) -> Probe:
        """The probe for parameters of ``shapes`` (ascending name order) under ``seed``: each
        tensor gets ``coords`` × its share of the parameters, at least one coordinate."""
        sizes = [math.prod(int(d) for d in s) for s in shapes]
        total = sum(sizes)
        if total < 1 or coords < 1 or projections < 1:
            raise ValueError("a probe needs parameters, coordinates and projections")
        indices = []
        for n, size in enumerate(sizes):
            want = max(1, round(coords * size / total))
            gen = _generator(seed, b"coords" + n.to_bytes(4, "little"))
            indices.append(torch.randint(size, (want,), generator=gen))
        width = sum(int(i.numel()) for i in indices)
        bits = torch.randint(2, (projections, width), generator=_generator(seed, b"signs"))
        return cls(tuple(indices), bits.float().mul_(2).sub_(1))

    def gather(self, tensors: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """The probed coordinates of ``tensors`` (parameter-shaped, e.g. ``.grad``; None reads
        as zeros), float32 on the CPU."""
        if len(tensors) != len(self.indices):
            raise ValueError(f"{len(tensors)} tensors for a probe of {len(self.indices)}")
        parts = []
        for t, idx in zip(tensors, self.indices, strict=True):
            if t is None:
                parts.append(torch.zeros(idx.numel()))
            else:
                flat = t.detach().reshape(-1)
                parts.append(flat[idx.to(flat.device)].float().cpu())
        return torch.cat(parts)

    def project(self, values: torch.Tensor) -> torch.Tensor:
        """The fingerprint of gathered ``values``: ``signs @ values / √width``, float32."""
        return self.signs @ values.float() / math.sqrt(values.numel())


@dataclass(frozen=True, slots=True)
class SampleCommitments:
    """A trainer's fingerprints, one per group of ``group`` consecutive samples of its batch (its
    micro-batches; the last may be smaller), each ``PROJECTIONS`` values."""

    group: int
    values: torch.Tensor
    """``[groups, PROJECTIONS]`` float32 (as sent: rounded to f16)."""
    lookahead: bytes = NO_LOOKAHEAD
    """The content fingerprint (``distro_fingerprint``) of the trainer's previous result, whose
    sign it looked ahead by (``Distro.lookahead(verifiable=True)``); ``NO_LOOKAHEAD`` when it
    had none, and trained at the pre-round weights."""

    def group_of(self, row: int) -> int:
        """The group that holds the batch's sample ``row``."""
        return row // self.group

    def rows(self, group: int, batch_size: int) -> tuple[int, ...]:
        """The batch offsets of ``group``'s samples."""
        return tuple(range(group * self.group, min(batch_size, (group + 1) * self.group)))


def agreement(committed: torch.Tensor, recomputed: torch.Tensor) -> float:
    """Cosine between two fingerprints; 0 when either is all zeros (nothing to agree on)."""
    a, b = committed.float().reshape(-1), recomputed.float().reshape(-1)
    na, nb = float(a.norm()), float(b.norm())
    if na == 0 or nb == 0 or not math.isfinite(na * nb):
        return 0.0
    return float(a @ b) / (na * nb)


class MicroBatchFingerprints:
    """The fingerprints of one run of micro-batches: after each one's backward, the probed
    coordinates' change since the previous one (the micro-batch's own gradient, read from the
    accumulated ``.grad`` without a copy of it), scaled back to the micro-batch's mean loss.
    ``model``'s parameters are read in ascending name order, as the probe was made for."""

    def __init__(
        self,
        model: torch.nn.Module,
        probe: Probe,
        gather: Callable[[Sequence[torch.Tensor | None]], torch.Tensor] | None = None,
    ) -> None:
        """``gather``: how the probed coordinates are read from the ``.grad`` tensors (default
        ``probe.gather``; a tensor-parallel rank, which holds slices, reads them with its group:
        ``psyche.training.parallel.sharded_probe``)."""
        self.params = [p for _, p in sorted(model.named_parameters(), key=lambda kv: kv[0])]
        self.probe = probe
        self.gather = gather if gather is not None else probe.gather
        self.before = torch.zeros(probe.signs.shape[1])
        self.rows: list[torch.Tensor] = []

    def record(self, *, fresh: bool, scale: float) -> None:
        """After a micro-batch's backward, whose loss was divided by ``scale``; ``fresh``:
        ``.grad`` holds that micro-batch alone."""
        now = self.gather([p.grad for p in self.params])
        own = now if fresh else now - self.before
        self.before = now
        self.rows.append(self.probe.project(own * scale))

    def values(self) -> torch.Tensor:
        """``[micro-batches, PROJECTIONS]`` float32, in the order they were recorded."""
        if not self.rows:
            return torch.zeros(0, self.probe.signs.shape[0])
        return torch.stack(self.rows)
