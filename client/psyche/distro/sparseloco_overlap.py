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

import numpy as np
import numpy.typing as npt

from psyche.distro.copy_index import CopyKeys
from psyche.distro.overlap import NEAR_DUPLICATE, REPEAT_MIN_TILES
from psyche.distro.sparseloco_payload import (
    ChunkGroup,
    SparseLoCoPayload,
    SparseLoCoSettings,
    SparseTensor,
    tensor_groups,
)

__all__ = ["copy_keys", "near_duplicate", "signed_overlap", "sparse_groups"]

Groups = tuple[tuple[ChunkGroup, ...], ...]

DENSE_SHARE = 4
"""A group whose chunks keep more than 1/``DENSE_SHARE`` of their entries is left out."""


@functools.cache
def sparse_groups(shapes: tuple[tuple[int, ...], ...], settings: SparseLoCoSettings) -> Groups:
    """Per tensor, its chunk groups that the overlap counts (the sparse ones)."""
    out = []
    for shape in shapes:
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        groups = tensor_groups(numel, settings)
        out.append(tuple(g for g in groups if g.k * DENSE_SHARE <= g.n))
    return tuple(out)


def _tensor_keys(
    t: SparseTensor, all_groups: Sequence[ChunkGroup], counted: Sequence[ChunkGroup]
) -> npt.NDArray[np.int64]:
    """One int64 per kept entry of the counted groups: (flat index) · 2 + (positive)."""
    parts = []
    for g, idx, signs in zip(all_groups, t.indices, t.signs, strict=True):
        if g not in counted:
            continue
        base = g.start + g.n * np.arange(g.chunks, dtype=np.int64)[:, None]
        parts.append(((idx + base) * 2 + (signs == 0)).reshape(-1).astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _keys(
    payload: SparseLoCoPayload, shapes: tuple[tuple[int, ...], ...], settings: SparseLoCoSettings
) -> list[npt.NDArray[np.int64]]:
    counted = sparse_groups(shapes, settings)
    out = []
    for t, shape, sparse in zip(payload.tensors, shapes, counted, strict=True):
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        out.append(_tensor_keys(t, tensor_groups(numel, settings), sparse))
    return out


def copy_keys(
    payload: SparseLoCoPayload, shapes: tuple[tuple[int, ...], ...], settings: SparseLoCoSettings
) -> CopyKeys:
    """The keys the copy check's sketch is made of (``psyche.distro.copy_index``)."""
    repeatable = [
        sum(g.chunks for g in groups) >= REPEAT_MIN_TILES
        for groups in sparse_groups(shapes, settings)
    ]
    return CopyKeys.of(_keys(payload, shapes, settings), repeatable)


def _overlaps(
    a: SparseLoCoPayload,
    b: SparseLoCoPayload,
    shapes: tuple[tuple[int, ...], ...],
    settings: SparseLoCoSettings,
) -> list[tuple[int, int]]:
    """Per tensor, (keys of ``a``, those also in ``b``)."""
    return [
        (int(ka.size), int(np.isin(ka, kb, assume_unique=True).sum()))
        for ka, kb in zip(_keys(a, shapes, settings), _keys(b, shapes, settings), strict=True)
    ]


def signed_overlap(
    a: SparseLoCoPayload,
    b: SparseLoCoPayload,
    shapes: tuple[tuple[int, ...], ...],
    settings: SparseLoCoSettings,
) -> float:
    """The share of ``a``'s counted kept entries that ``b`` keeps with the same sign."""
    pairs = _overlaps(a, b, shapes, settings)
    total = sum(n for n, _ in pairs)
    return sum(m for _, m in pairs) / total if total else 0.0


def near_duplicate(
    a: SparseLoCoPayload,
    b: SparseLoCoPayload,
    shapes: tuple[tuple[int, ...], ...],
    settings: SparseLoCoSettings,
) -> bool:
    """Whether ``a`` is refused as a copy of ``b`` (module docstring)."""
    pairs = _overlaps(a, b, shapes, settings)
    total = sum(n for n, _ in pairs)
    if total and sum(m for _, m in pairs) / total >= NEAR_DUPLICATE:
        return True
    repeatable = [
        sum(g.chunks for g in groups) >= REPEAT_MIN_TILES
        for groups in sparse_groups(shapes, settings)
    ]
    return any(rep and n and m == n for rep, (n, m) in zip(repeatable, pairs, strict=True))
