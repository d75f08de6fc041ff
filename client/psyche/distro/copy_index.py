"""The copy check at a cost per result that does not grow with the round: a sketch of each result,
made once when it arrives, and an index of the held results' sketches.

See docs/protocol.md, "Threat model and result verification" (copy checks). The decision rule is
unchanged: a result is refused when its content fingerprint equals a held result's, or when
``psyche.distro.overlap.near_duplicate`` holds against one (signed overlap ``|A ∩ B| / |A|`` at
least ``NEAR_DUPLICATE`` = 0.75, or a tensor of at least ``REPEAT_MIN_TILES`` tiles repeated
exactly). Comparing a download with every held result made a client's round O(K²) for K
results (issue 38); the index instead names the few held results that can meet the rule, and only
those are decoded and measured exactly.

What a sketch holds (:func:`sketch`), from the result's keys — one per chosen coefficient,
(tensor, tile, index, sign), as the overlap counts them:

- the **fingerprint**, looked up in a dict: exact copies, found with certainty;
- per tensor of at least ``REPEAT_MIN_TILES`` tiles, an order-free **hash of its key set** (the
  wrapping sum of its keys' salted hashes), looked up in a dict: a repeated tensor is found with
  certainty. (Under a run's format every tensor has
  its fixed ``tiles · k`` coefficients, distinct within a tile — the decoder refuses anything
  else — so "all of A's keys of the tensor are B's" is "the two key sets are equal".)
- ``BINS`` = ``BANDS`` × ``ROWS`` = 204 × 5 = 1020 **MinHash** values (one-permutation hashing:
  each key hashed once, salted; each pass permutes those hashes by an odd salted multiplier
  and puts a key in the bin its top bits name, ``B`` = 2^b bins per pass, the largest power of
  two that gives a bin ``FILL`` = 8 keys on average, at most 1024; as many passes as make 1020
  bins; a bin is then empty with probability at most e⁻⁸ = 3.4·10⁻⁴), and the **LSH band
  keys**: one per band of 5 bins (a wrapping sum of the bins times odd salted per-row
  constants, plus a per-band one: equal bands have equal keys), looked up in a dict of buckets.
  Over salted pairs at the threshold of 296, 2,448 and 5,000 keys (300 each in the tests, 1,500
  when this was made) the bins agree at rate J · P(bin filled) with at most binomial variance,
  and the shared bands average ``BANDS · J⁵``, as the independent-bins figures below assume.

Two bins agree with probability J · P(bin not empty), J the Jaccard similarity ``|A∩B|/|A∪B|``.
For two results of one format (equal sizes) a signed overlap o is J = o / (2 − o), so the
threshold 0.75 is J = 0.6 (the overlap is asymmetric only when sizes differ, which a run's format
rules out). Treating bins as independent:

- a pair at overlap 0.75 shares no band with probability (1 − (0.6 · (1 − e⁻⁸))⁵)²⁰⁴ ≤ 7.0·10⁻⁸;
- a band candidate must then agree in at least ``AGREE_MIN`` = 530 of the 1020 bins (J ≈ 0.52)
  before it is measured exactly; a pair at 0.75 falls short with probability ≤ 9.2·10⁻⁸ (binomial
  tail at p = 0.6). So a copy at the threshold escapes the sketch with probability ≤ 1.7·10⁻⁷, and
  one further above it with less;
- honest pairs become band candidates with probability 8.2·10⁻⁵ at overlap 0.1 (what different
  trainers share once training has moved), 3.4·10⁻³ at 0.2 and 3.4·10⁻² at 0.3; at overlap 0.64
  (honest results of a first round trained from one shared model) with probability 0.99, but
  such a pair passes the bin count with probability 9.6·10⁻⁴, so it is hardly ever decoded. In
  that round a download costs one vectorised comparison of 1020 values per held result.

Per held result the index keeps the 1020 values (8 KiB, in blocks of 64 entries) and its band
and tensor keys in a hash table (16 bytes a slot, at most half full): about 16 KB — not the
decoded payload: a candidate is decoded again from its bytes, which the round holds anyway.
Making a sketch is one compiled pass over the N keys (``psyche.distro.copy_kernels``: a full
hash per key, then a multiplication and a ``min`` per pass), and the held band keys live in
compiled hash tables, not dicts; a DisTrO result is read in one conversion of its tensors
(:func:`distro_sketch`; the v2 decoder's flat arrays, ``Payload.flat``, need none), with what
depends only on the run's layout and salt made once (:func:`_plan`, :func:`_layout`). Costs on
the tiny model's payloads are in bench/README.md ("Scale").

The hashes are keyed by ``SALT``, drawn at random once per process and never sent: a free rider
who knew which coefficients decide the bins could change just those and escape with a copy.
Decisions stay those of the exact rule; the sketch only decides what is measured.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from psyche.distro.overlap import REPEAT_MIN_TILES
from psyche.distro.payload import Payload
from psyche.distro.payload_types import FlatLayout

if TYPE_CHECKING:
    from psyche.distro.copy_kernels import HashTable

__all__ = [
    "AGREE_MIN",
    "BANDS",
    "BINS",
    "COUNTS",
    "ROWS",
    "CopyCounts",
    "CopyIndex",
    "CopyKeys",
    "CopySketch",
    "distro_keys",
    "jaccard_at",
    "prepare",
    "sketch",
]

ROWS = 5
"""MinHash values per LSH band."""
BANDS = 204
"""LSH bands: a held result is a candidate when one band of its values equals the new one's."""
BINS = ROWS * BANDS
"""MinHash values per sketch."""
FILL = 8
"""Keys per bin on average at least, so that a bin is empty with probability at most e⁻⁸."""
AGREE_MIN = 530
"""Of the ``BINS`` values, how many a band candidate must share before it is measured exactly:
a pair at the threshold (J = 0.6) shares fewer with probability ≤ 9.2·10⁻⁸."""

SALT = secrets.randbits(64)
"""This process's secret hash key (see the module docstring)."""

EMPTY = np.uint64(2**64 - 1)
"""An empty bin's value."""

U64 = npt.NDArray[np.uint64]


@functools.cache
def _kernels() -> ModuleType:
    """The compiled loops (``psyche.distro.copy_kernels``), loaded on first use: numba's import
    and the kernels' load from its cache take about a second, which a process that never checks
    a keyed result should not pay."""
    from psyche.distro import copy_kernels

    return copy_kernels


def prepare() -> None:
    """Load the copy check's compiled loops now (a client calls this off its event loop at
    start-up, so its first result does not wait for them)."""
    _kernels()


def _mixed(*values: int) -> U64:
    """One uint64 per value, each hashed by the compiled ``copy_kernels.mix`` (splitmix64's
    finaliser, as the keys are): the per-tensor, per-pass and per-band constants, made once
    per run."""
    mix = _kernels().mix
    return np.array([mix(np.uint64(v % 2**64)) for v in values], dtype=np.uint64)


def jaccard_at(overlap: float) -> float:
    """The Jaccard similarity of two equal-sized sets whose overlap ``|A∩B| / |A|`` is
    ``overlap``."""
    return overlap / (2.0 - overlap)


@dataclass(frozen=True, slots=True, eq=False)
class _Plan:
    """What every sketch of one key layout (tensor sizes, repeat rule) under one salt shares:
    every result of a run has the same layout, so this is made once per run, not per result."""

    n: int
    tensor_const: U64
    """Per key, its tensor's constant (a tensor's position changes its keys' hashes)."""
    pass_mul: U64
    """Per MinHash pass, an odd multiplier: pass ``p`` permutes the keys' hashes by
    ``h ↦ h · pass_mul[p]`` (mod 2⁶⁴)."""
    shift: np.uint64
    """A permuted hash's bin within its pass is its top ``64 − shift`` bits (64: one bin)."""
    per_pass: int
    """Bins per pass: pass ``p``'s bins are ``p · per_pass`` onwards (the first ``BINS`` of all
    passes' bins are kept)."""
    band_row: U64
    """Per row of a band, an odd constant."""
    band_const: U64
    """Per band, a constant added to its key (equal rows in two different bands differ)."""
    rep_first: npt.NDArray[np.int64]
    """Per tensor the exact-repeat rule covers, its first key."""
    rep_end: npt.NDArray[np.int64]
    """Per such tensor, one past its last key."""


@functools.lru_cache(maxsize=64)
def _plan(sizes: tuple[int, ...], repeatable: tuple[bool, ...], salt: int) -> _Plan:
    n = sum(sizes)
    # Bins per pass: a power of two (a bin is then a hash's top bits, one shift), the largest
    # with at least FILL keys per bin, at most the power of two that covers BINS.
    bits = min(max(1, n // FILL).bit_length() - 1, (BINS - 1).bit_length())
    per_pass = 1 << bits
    passes = math.ceil(BINS / per_pass)
    tensor_const = np.repeat(_mixed(*(salt + 1 + t for t in range(len(sizes)))), sizes)
    ends = np.cumsum(np.array(sizes, dtype=np.int64))
    big = [t for t, (size, rep) in enumerate(zip(sizes, repeatable, strict=True)) if rep and size]
    chosen = np.array(big, dtype=np.int64)
    out = _Plan(
        n,
        np.ascontiguousarray(tensor_const),
        _mixed(*(salt ^ (0x5EED << 20) ^ p for p in range(passes))) | np.uint64(1),
        np.uint64(64 - bits),
        per_pass,
        _mixed(*(salt ^ (n << 16) ^ (0xB0 << 8) ^ r for r in range(ROWS))) | np.uint64(1),
        _mixed(*(salt ^ (n << 16) ^ (j << 3) ^ 7 for j in range(BANDS))),
        np.ascontiguousarray(ends[chosen] - np.array(sizes, dtype=np.int64)[chosen]),
        np.ascontiguousarray(ends[chosen]),
    )
    # Not made read-only, though shared by every sketch of the run: the compiled loops take
    # writable arrays (numba types a read-only array as another type), and only read these.
    return out


@dataclass(frozen=True, slots=True)
class CopyKeys:
    """What the near-duplicate rule compares: every tensor's chosen coefficients as int64 keys
    (as ``psyche.distro.overlap.signed_keys`` makes them), tensor after tensor, and per tensor its
    number of keys and whether it is large enough for the exact-repeat rule."""

    keys: npt.NDArray[np.int64]
    sizes: tuple[int, ...]
    repeatable: tuple[bool, ...]

    @classmethod
    def of(cls, tensors: Sequence[npt.NDArray[np.int64]], repeatable: Sequence[bool]) -> CopyKeys:
        keys = np.concatenate(tensors) if tensors else np.zeros(0, dtype=np.int64)
        return cls(keys.astype(np.int64), tuple(t.size for t in tensors), tuple(repeatable))


@dataclass(frozen=True, slots=True, eq=False)
class _Layout:
    """What every payload of one layout (per tensor: index shape, ``totalk``, dtypes) shares."""

    sizes: tuple[int, ...]
    repeatable: tuple[bool, ...]
    base: npt.NDArray[np.int64]
    """Per key, ``tile · totalk``."""
    cuts: tuple[int, ...]
    """Per tensor, one past its last key."""
    native: bool
    """int64 indices and float32 values, as the decoder makes them: read through numpy."""


@functools.lru_cache(maxsize=64)
def _layout(shapes: tuple[tuple[tuple[int, ...], int, torch.dtype, torch.dtype], ...]) -> _Layout:
    sizes = [math.prod(shape[0]) for shape in shapes]
    ks = [max(1, shape[0][-1]) if shape[0] else 1 for shape in shapes]
    base = np.concatenate(
        [
            np.arange(n, dtype=np.int64) // k * shape[1]
            for n, k, shape in zip(sizes, ks, shapes, strict=True)
        ]
    )
    base.setflags(write=False)
    return _Layout(
        tuple(sizes),
        tuple(n // k >= REPEAT_MIN_TILES for n, k in zip(sizes, ks, strict=True)),
        base,
        tuple(np.cumsum(sizes).tolist()),
        all(i == torch.int64 and v == torch.float32 for _, _, i, v in shapes),
    )


@functools.lru_cache(maxsize=64)
def _flat_layout(flat: FlatLayout) -> _Layout:
    """The layout of a decoder's flat arrays (cached by the spec's `FlatLayout`, by identity)."""
    i64, f32 = torch.int64, torch.float32
    return _layout(tuple((shape, totalk, i64, f32) for shape, totalk in flat.shapes))


def _distro_parts(
    payload: Payload,
) -> tuple[_Layout, npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """A non-empty payload's layout and, over all its tensors, the int64 indices, the values'
    sign bits (as the fingerprint hashes them) and whether each value is positive (as the keys
    hold it). Decoded payloads hold int64 indices and float32 values: those go through numpy
    with one conversion per tensor; anything else through torch as the fingerprint does."""
    results = payload.results
    flat = payload.flat
    if flat is not None and flat.results is results:
        # The v2 decoder's arrays, of which the tensors are views: no conversion at all.
        val = flat.val
        sign = np.signbit(val) if val.dtype.kind == "f" else val < 0
        return _flat_layout(flat.layout), flat.idx, sign, val > 0
    layout = _layout(tuple((r.idx.shape, r.totalk, r.idx.dtype, r.val.dtype) for r in results))
    with contextlib.suppress(TypeError, RuntimeError):  # on another device, or with grad
        if layout.native:
            idx = np.concatenate([r.idx.numpy() for r in results], axis=None)
            val = np.concatenate([r.val.numpy() for r in results], axis=None)
            return layout, idx, np.signbit(val), val > 0
    idx = torch.cat([r.idx.reshape(-1) for r in results]).detach().cpu().to(torch.int64).numpy()
    tval = torch.cat([r.val.reshape(-1) for r in results]).detach().cpu()
    return layout, idx, torch.signbit(tval.float()).numpy(), (tval > 0).numpy()


def content_fingerprint(idx: npt.NDArray[np.int64], sign: npt.NDArray[np.bool_]) -> bytes:
    """SHA-256 of a DisTrO result's content: all its int64 indices, then all its sign bits (a
    byte each), tensor after tensor (what ``psyche.distro.result_format.distro_fingerprint``
    hashes; one definition for it and :func:`distro_sketch`)."""
    h = hashlib.sha256(np.ascontiguousarray(idx, dtype=np.int64).view(np.uint8).data)
    h.update(np.ascontiguousarray(sign, dtype=np.bool_).view(np.uint8).data)
    return h.digest()


def distro_keys(payload: Payload) -> CopyKeys:
    """A DisTrO payload's keys: per chosen coefficient, (tile · totalk + index) · 2 + (value > 0),
    as ``signed_keys``, computed over all tensors at once."""
    if not payload.results:
        return CopyKeys.of([], [])
    layout, idx, _, positive = _distro_parts(payload)
    return CopyKeys((layout.base + idx) * 2 + positive, layout.sizes, layout.repeatable)


def distro_sketch(payload: Payload, salt: int | None = None) -> CopySketch:
    """``sketch(distro_fingerprint(payload), distro_keys(payload), salt)``, from one conversion
    of the payload's tensors instead of two (the fingerprint and the keys read the same indices
    and values)."""
    if not payload.results:
        return sketch(hashlib.sha256().digest(), CopyKeys.of([], []), salt)
    layout, idx, sign, positive = _distro_parts(payload)
    keys = (layout.base + idx) * 2 + positive
    return _sketch(content_fingerprint(idx, sign), keys, layout.sizes, layout.repeatable, salt)


@dataclass(frozen=True, slots=True, eq=False)
class CopySketch:
    """What the copy check keeps of one result (see the module docstring)."""

    fingerprint: bytes
    scheme: tuple[int, int] = (0, 0)
    """(salt, number of keys): sketches of another scheme are never compared by their bins."""
    bins: U64 | None = None
    """``BINS`` MinHash values (``EMPTY`` for an empty bin); None for a format without a
    near-duplicate rule."""
    index_keys: U64 = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    """What the index looks the result up by: the band keys of the bands without an empty bin,
    in band order, then the key-set hash of each tensor the exact-repeat rule covers."""
    n_bands: int = 0
    """How many of :attr:`index_keys` are band keys."""

    @property
    def bands(self) -> tuple[int, ...]:
        """The band keys, as integers."""
        return tuple(self.index_keys[: self.n_bands].tolist())

    @property
    def tensors(self) -> tuple[int, ...]:
        """The large tensors' key-set hashes, as integers."""
        return tuple(self.index_keys[self.n_bands :].tolist())


def sketch(fingerprint: bytes, keys: CopyKeys | None, salt: int | None = None) -> CopySketch:
    """The sketch of a result with content ``fingerprint`` and ``keys`` (None: a format whose
    only copy rule is the fingerprint), under ``salt`` (default: this process's ``SALT``)."""
    if keys is None:
        return CopySketch(fingerprint)
    return _sketch(fingerprint, keys.keys, keys.sizes, keys.repeatable, salt)


def _sketch(
    fingerprint: bytes,
    keys: npt.NDArray[np.int64],
    sizes: tuple[int, ...],
    repeatable: tuple[bool, ...],
    salt: int | None,
) -> CopySketch:
    salt = SALT if salt is None else salt
    plan = _plan(sizes, repeatable, salt)
    # One compiled pass (copy_kernels.sketch_into): per key a salted full hash; one-permutation
    # MinHash, each pass permuting the hashes by an odd multiplier (a bijection; its top bits
    # pick the bin); per large tensor the wrapping sum of its keys' hashes (order-free); per
    # band the wrapping sum of its rows times odd per-row constants plus a per-band constant
    # (equal rows, equal keys; rows differing in one value never collide, in more by 2⁻⁶⁴).
    bins = np.empty(plan.pass_mul.size * plan.per_pass, dtype=np.uint64)
    out = np.empty(BANDS + plan.rep_first.size, dtype=np.uint64)
    written = _kernels().sketch_into(
        np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64),
        plan.tensor_const,
        plan.pass_mul,
        plan.shift,
        plan.per_pass,
        plan.band_row,
        plan.band_const,
        plan.rep_first,
        plan.rep_end,
        bins,
        out,
    )
    return CopySketch(
        fingerprint, (salt, plan.n), bins[:BINS], out[: written + plan.rep_first.size], written
    )


@dataclass
class CopyCounts:
    """Work done by the copy check in this process, for tests and benchmarks."""

    checks: int = 0
    """Results checked (``psyche.daemon.copy_check.copied_from`` calls)."""
    band_candidates: int = 0
    """Held results that shared an LSH band with a checked one."""
    candidates: int = 0
    """Held results handed back for the exact measure."""
    confirmations: int = 0
    """Exact measures taken (a held result decoded and compared)."""

    def reset(self) -> None:
        self.checks = self.band_candidates = self.candidates = self.confirmations = 0


COUNTS = CopyCounts()
"""This process's copy-check counts."""

T = TypeVar("T")


_BLOCK = 64
"""Entries per block of the index's stored bins (512 KiB)."""


@dataclass(eq=False)
class CopyIndex(Generic[T]):
    """The sketches of one round's held results, looked up in O(1) per result."""

    entries: list[T] = field(default_factory=list)
    """The held results, in the order they were added."""
    _exact: dict[bytes, list[int]] = field(default_factory=dict)
    _keys: HashTable | None = None
    """Each held result's band keys and large tensors' key-set hashes → its entry, times two,
    plus one for a tensor's (made with the first entry that has such keys). One compiled hash
    table, not dicts: at 256 clients a round's dicts held 52,000 band keys, and their probes and
    inserts, 204 per result in Python, cost more than the sketch."""
    _schemes: list[tuple[int, int] | None] = field(default_factory=list)
    _bins: list[U64] = field(default_factory=list)
    """Blocks of ``_BLOCK`` entries' bins (row ``i % _BLOCK`` of block ``i // _BLOCK``). Fixed
    blocks, not one matrix grown by doubling (which reallocated megabytes: 18 µs per insert),
    nor the sketches' own arrays (kept alive, they made every later sketch allocate cold
    memory); the few band candidates' rows are gathered when a lookup needs them."""

    def add(self, entry: T, sk: CopySketch) -> None:
        """Hold ``entry``, whose sketch is ``sk``."""
        seq = len(self.entries)
        self.entries.append(entry)
        self._exact.setdefault(sk.fingerprint, []).append(seq)
        if sk.index_keys.size:
            if self._keys is None:
                self._keys = _kernels().HashTable()
            tags = np.full(sk.index_keys.size, 2 * seq, dtype=np.uint64)
            tags[sk.n_bands :] += np.uint64(1)
            self._keys.add(sk.index_keys, tags)
        self._schemes.append(sk.scheme if sk.bins is not None else None)
        if seq % _BLOCK == 0:
            self._bins.append(np.empty((_BLOCK, BINS), dtype=np.uint64))
        if sk.bins is not None:
            self._bins[-1][seq % _BLOCK] = sk.bins

    def exact(self, sk: CopySketch) -> list[T]:
        """The held entries with ``sk``'s fingerprint, in the order they were added."""
        return [self.entries[i] for i in self._exact.get(sk.fingerprint, ())]

    def near(self, sk: CopySketch) -> list[T]:
        """The held entries that may be near duplicates of ``sk``'s result, in the order they
        were added: those sharing a large tensor's key set, and those sharing an LSH band and
        at least ``AGREE_MIN`` bins. Every entry the exact rule accepts is among them, but for
        the probabilities in the module docstring."""
        return [entry for entry, _ in self.near_scored(sk)]

    def near_scored(self, sk: CopySketch) -> list[tuple[T, float | None]]:
        """:meth:`near`'s entries with the share of ``sk``'s bins each agrees in (an estimate
        of their keys' Jaccard similarity; None for an entry found by a tensor's key set)."""
        if self._keys is None or not sk.index_keys.size:
            return []
        hits = self._keys.find(sk.index_keys)
        if not hits.size:
            return []  # most lookups: nothing shares a band or a tensor
        found: dict[int, float | None] = {}
        banded: set[int] = set()
        # A band key equal to another result's tensor hash (chance 2⁻⁶⁴) only adds a candidate.
        for tag in hits.tolist():
            if tag & 1:
                found[tag >> 1] = None
            else:
                banded.add(tag >> 1)
        banded -= found.keys()
        COUNTS.band_candidates += len(banded)
        if banded and sk.bins is not None:
            same = [i for i in sorted(banded) if self._schemes[i] == sk.scheme]
            if same:
                rows = np.stack([self._bins[i // _BLOCK][i % _BLOCK] for i in same])
                filled = max(1, int((sk.bins != EMPTY).sum()))
                agree = ((rows == sk.bins) & (sk.bins != EMPTY)).sum(axis=1)
                for i, a in zip(same, agree.tolist(), strict=True):
                    if a >= AGREE_MIN:
                        found[i] = a / filled
        COUNTS.candidates += len(found)
        return [(self.entries[i], found[i]) for i in sorted(found)]
