"""Near-duplicate SparseLoCo results: the signed overlap of their kept entries.

DisTrO's copy rule (``psyche.distro.overlap``) carried over to SparseLoCo payloads: a result is
refused as a copy of a held one when at least ``NEAR_DUPLICATE`` (0.75) of its kept entries —
(tensor, flat index, sign) — are the held result's too, or when a tensor of at least
``REPEAT_MIN_TILES`` chunks repeats the held result's kept entries exactly. Before, only exact
copies (equal fingerprints) were refused, so a copy with a few signs flipped passed (issue 39,
bench/README.md "SparseLoCo: does a loss test on public data tell?").

Calibration (``bench/sparseloco_verify.py``, tiny preset, 4 clients, 24 rounds): honest results
of different trainers share 6–18 % of their kept indices at top-32 of 4,096 (H = 8), and 7–20 %
at the shipped tiny config's top-8 of 256 (H = 2), round 0 from one shared model included; the
signed overlap is at most that. A copy with 5 % of its signs flipped has a signed overlap of
0.95. A copy changed in more than a quarter of its entries passes, as under DisTrO; it is then a
worse update, and the exact copy and repeated-tensor rules still hold.

Dense groups are left out: where a chunk keeps more than a quarter of its entries, honest results
share most of its indices by construction (all of them when every entry is kept), and the overlap
would measure only how often their signs agree.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psyche.distro.copy_index import CopyKeys
from psyche.distro.overlap import (
    NEAR_DUPLICATE,
    REPEAT_MIN_TILES,
    closer_than_reference,
    repeat_counts,
)
from psyche.distro.sparseloco_payload import (
    ChunkGroup,
    SparseLoCoPayload,
    SparseLoCoSettings,
    SparseTensor,
    tensor_groups,
)

__all__ = ["copy_keys", "near_duplicate", "signed_overlap", "sparse_groups"]

Groups = tuple[tuple[ChunkGroup, ...], ...]
Shapes = tuple[tuple[int, ...], ...]

DENSE_SHARE = 4
"""A group whose chunks keep more than 1/``DENSE_SHARE`` of their entries is left out."""


@dataclass(frozen=True)
class _Layout:
    """What the rule needs of a model's shapes, worked out once per (shapes, settings)."""

    counted: tuple[tuple[bool, ...], ...]
    """Per tensor, per chunk group: whether the overlap counts it (a sparse group)."""
    groups: Groups
    """Per tensor, all its chunk groups (a payload's indices and signs follow them)."""
    repeatable: tuple[bool, ...]
    """Per tensor: whether its counted groups have ``REPEAT_MIN_TILES`` chunks or more."""


@functools.cache
def _layout(shapes: Shapes, settings: SparseLoCoSettings) -> _Layout:
    groups = tuple(
        tensor_groups(int(np.prod(shape, dtype=np.int64)) if shape else 1, settings)
        for shape in shapes
    )
    counted = tuple(tuple(g.k * DENSE_SHARE <= g.n for g in gs) for gs in groups)
    repeatable = tuple(
        sum(g.chunks for g, c in zip(gs, cs, strict=True) if c) >= REPEAT_MIN_TILES
        for gs, cs in zip(groups, counted, strict=True)
    )
    return _Layout(counted, groups, repeatable)


def sparse_groups(shapes: Shapes, settings: SparseLoCoSettings) -> Groups:
    """Per tensor, its chunk groups that the overlap counts (the sparse ones)."""
    layout = _layout(shapes, settings)
    return tuple(
        tuple(g for g, c in zip(gs, cs, strict=True) if c)
        for gs, cs in zip(layout.groups, layout.counted, strict=True)
    )


def _tensor_keys(
    t: SparseTensor, groups: Sequence[ChunkGroup], counted: Sequence[bool]
) -> npt.NDArray[np.int64]:
    """One int64 per kept entry of the counted groups: (flat index) · 2 + (positive)."""
    parts = []
    for g, c, idx, signs in zip(groups, counted, t.indices, t.signs, strict=True):
        if not c:
            continue
        base = g.start + g.n * np.arange(g.chunks, dtype=np.int64)[:, None]
        parts.append(((idx + base) * 2 + (signs == 0)).reshape(-1).astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _keys(payload: SparseLoCoPayload, layout: _Layout) -> list[npt.NDArray[np.int64]]:
    return [
        _tensor_keys(t, groups, counted)
        for t, groups, counted in zip(payload.tensors, layout.groups, layout.counted, strict=True)
    ]


def copy_keys(payload: SparseLoCoPayload, shapes: Shapes, settings: SparseLoCoSettings) -> CopyKeys:
    """The keys the copy check's sketch is made of (``psyche.distro.copy_index``)."""
    layout = _layout(shapes, settings)
    return CopyKeys.of(_keys(payload, layout), layout.repeatable)


def _overlaps(a: SparseLoCoPayload, b: SparseLoCoPayload, layout: _Layout) -> list[tuple[int, int]]:
    """Per tensor, (keys of ``a``, those also in ``b``)."""
    return [
        (int(ka.size), int(np.isin(ka, kb, assume_unique=True).sum()))
        for ka, kb in zip(_keys(a, layout), _keys(b, layout), strict=True)
    ]


def _share(pairs: Sequence[tuple[int, int]]) -> float:
    total = sum(n for n, _ in pairs)
    return sum(m for _, m in pairs) / total if total else 0.0


def signed_overlap(
    a: SparseLoCoPayload, b: SparseLoCoPayload, shapes: Shapes, settings: SparseLoCoSettings
) -> float:
    """The share of ``a``'s counted kept entries that ``b`` keeps with the same sign."""
    return _share(_overlaps(a, b, _layout(shapes, settings)))


def near_duplicate(
    a: SparseLoCoPayload,
    b: SparseLoCoPayload,
    shapes: Shapes,
    settings: SparseLoCoSettings,
    ref: SparseLoCoPayload | None = None,
) -> bool:
    """Whether ``a`` is refused as a copy of ``b`` (module docstring); given ``ref``, a result of
    ``a``'s round other than ``b``, only if ``a`` is near ``b`` rather than near the round's
    results alike, as under DisTrO (``psyche.distro.overlap.CLOSER``)."""
    layout = _layout(shapes, settings)
    pairs = _overlaps(a, b, layout)
    against = _overlaps(a, ref, layout) if ref is not None else None
    if _share(pairs) >= NEAR_DUPLICATE and (
        against is None or closer_than_reference(_share(pairs), _share(against))
    ):
        return True
    repeated = [rep and n and m == n for rep, (n, m) in zip(layout.repeatable, pairs, strict=True)]
    if against is not None:
        # ``r`` holds only where ``a`` has entries there (``n`` > 0, the same ``n`` as in pairs).
        repeated = [r and repeat_counts(m / n) for r, (n, m) in zip(repeated, against, strict=True)]
    return any(repeated)
