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
- per tensor of at least ``REPEAT_MIN_TILES`` tiles, an order-free **hash of its key set**, looked
  up in a dict: a repeated tensor is found with certainty. (Under a run's format every tensor has
  its fixed ``tiles · k`` coefficients, distinct within a tile — the decoder refuses anything
  else — so "all of A's keys of the tensor are B's" is "the two key sets are equal".)
- ``BINS`` = ``BANDS`` × ``ROWS`` = 204 × 5 = 1020 **MinHash** values (one-permutation hashing:
  keys hashed once per pass into ``B`` bins, ``B`` such that a bin gets ``FILL`` = 8 keys on
  average, as many passes as make 1020 bins; a bin is then empty with probability at most
  e⁻⁸ = 3.4·10⁻⁴), and the **LSH band keys**: one per band of 5 bins, looked up in a dict of
  buckets.

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

Per held result the index keeps the 1020 values (8 KiB), 204 band entries and one entry per large
tensor, about 19 KB in all (measured with tracemalloc) — not the decoded payload: a candidate is
decoded again from its bytes, which the round holds anyway. Making a sketch costs about
``max(N, 8 · 1020)`` hashes for N keys: about 0.5 ms for the tiny model's 280 keys with their
extraction from the payload (its decode takes 2–5 ms), 0.05–0.3 s for 2·10⁶ keys.

The hashes are keyed by ``SALT``, drawn at random once per process and never sent: a free rider
who knew which coefficients decide the bins could change just those and escape with a copy.
Decisions stay those of the exact rule; the sketch only decides what is measured.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from psyche.distro.overlap import REPEAT_MIN_TILES
from psyche.distro.payload import Payload

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
_G = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: U64) -> U64:
    """splitmix64's finaliser, elementwise (wrapping uint64 arithmetic)."""
    z = x + _G
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _mixed(*values: int) -> U64:
    """One uint64 per value, each hashed: the per-tensor, per-pass and per-band constants."""
    return _mix(np.array([v % 2**64 for v in values], dtype=np.uint64))


@functools.lru_cache(maxsize=256)
def _constants(kind: int, salt: int, n: int, count: int) -> U64:
    """``count`` hashed constants of one ``kind`` for (``salt``, ``n``), made once: every result
    of a run has the same key count, so rebuilding them per sketch was a third of its cost."""
    if kind == 0:  # per tensor
        out = _mixed(*(salt + 1 + t for t in range(count))) if count else np.zeros(0, np.uint64)
    elif kind == 1:  # per MinHash pass
        out = _mixed(*(salt ^ (0x5EED << 20) ^ p for p in range(count)))
    else:  # per LSH band, of a sketch of n keys
        out = _mixed(*(salt ^ (n << 16) ^ j for j in range(count)))
    out.setflags(write=False)
    return out


def jaccard_at(overlap: float) -> float:
    """The Jaccard similarity of two equal-sized sets whose overlap ``|A∩B| / |A|`` is
    ``overlap``."""
    return overlap / (2.0 - overlap)


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


def distro_keys(payload: Payload) -> CopyKeys:
    """A DisTrO payload's keys: per chosen coefficient, (tile · totalk + index) · 2 + (value > 0),
    as ``signed_keys``. Computed over all tensors at once: one concatenation in torch, then
    vectorised numpy; a per-tensor loop of small torch and numpy calls made this the sketch's
    largest part (0.7 of its 1.3 ms for the tiny model's 21 tensors, issue 38)."""
    results = payload.results
    if not results:
        return CopyKeys.of([], [])
    ks = np.array([max(1, r.k) for r in results], dtype=np.int64)
    sizes = np.array([r.idx.numel() for r in results], dtype=np.int64)
    idx = torch.cat([r.idx.reshape(-1) for r in results]).detach().cpu().to(torch.int64).numpy()
    positive = (torch.cat([r.val.reshape(-1) for r in results]).detach().cpu() > 0).numpy()
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    per_key_k = np.repeat(ks, sizes)
    tile = (np.arange(idx.size, dtype=np.int64) - starts) // per_key_k
    totalk = np.repeat(np.array([r.totalk for r in results], dtype=np.int64), sizes)
    keys = (tile * totalk + idx) * 2 + positive
    return CopyKeys(
        keys,
        tuple(int(n) for n in sizes),
        tuple(bool(n // k >= REPEAT_MIN_TILES) for n, k in zip(sizes, ks, strict=True)),
    )


@dataclass(frozen=True, slots=True, eq=False)
class CopySketch:
    """What the copy check keeps of one result (see the module docstring)."""

    fingerprint: bytes
    scheme: tuple[int, int] = (0, 0)
    """(salt, number of keys): sketches of another scheme are never compared by their bins."""
    bins: U64 | None = None
    """``BINS`` MinHash values (``EMPTY`` for an empty bin); None for a format without a
    near-duplicate rule."""
    bands: tuple[int, ...] = ()
    """The band keys of the bands without an empty bin."""
    tensors: tuple[int, ...] = ()
    """The key-set hash of each tensor the exact-repeat rule covers."""


def _minhash(keys: U64, salt: int) -> U64:
    """``BINS`` one-permutation MinHash values of ``keys`` (already hashed per tensor)."""
    n = keys.size
    per_pass = max(1, min(BINS, n // FILL))
    passes = math.ceil(BINS / per_pass)
    consts = _constants(1, salt, 0, passes)
    h = _mix(keys[None, :] ^ consts[:, None])  # passes x n
    local = ((h >> np.uint64(32)) * np.uint64(per_pass)) >> np.uint64(32)
    slot = local.astype(np.int64) + (np.arange(passes, dtype=np.int64) * per_pass)[:, None]
    out = np.full(passes * per_pass, EMPTY, dtype=np.uint64)
    np.minimum.at(out, slot.reshape(-1), h.reshape(-1))
    return out[:BINS]


def _band_keys(bins: U64, salt: int, n: int) -> tuple[int, ...]:
    rows = bins.reshape(BANDS, ROWS)
    key = _constants(2, salt, n, BANDS)
    for i in range(ROWS):
        key = _mix(key ^ rows[:, i])
    full = ~(rows == EMPTY).any(axis=1)
    return tuple(key[full].tolist())


def sketch(fingerprint: bytes, keys: CopyKeys | None, salt: int | None = None) -> CopySketch:
    """The sketch of a result with content ``fingerprint`` and ``keys`` (None: a format whose
    only copy rule is the fingerprint), under ``salt`` (default: this process's ``SALT``)."""
    if keys is None:
        return CopySketch(fingerprint)
    salt = SALT if salt is None else salt
    count = len(keys.sizes)
    consts = _constants(0, salt, 0, count)
    tensor_of = np.repeat(np.arange(count, dtype=np.int64), keys.sizes)
    hashed = _mix(keys.keys.astype(np.uint64) ^ consts[tensor_of])
    n = int(hashed.size)
    bins = _minhash(hashed, salt)
    return CopySketch(
        fingerprint, (salt, n), bins, _band_keys(bins, salt, n), _tensor_keys(hashed, keys, salt)
    )


def _tensor_keys(hashed: U64, keys: CopyKeys, salt: int) -> tuple[int, ...]:
    """An order-free hash of each repeat-rule tensor's key set (the wrapping sum of its keys'
    hashes, which already carry the tensor's number)."""
    big = [
        t
        for t, (size, rep) in enumerate(zip(keys.sizes, keys.repeatable, strict=True))
        if rep and size
    ]
    if not big:
        return ()
    ends = np.cumsum(np.array(keys.sizes, dtype=np.int64))
    sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(_mix(hashed), dtype=np.uint64)])
    chosen = np.array(big, dtype=np.int64)
    totals = sums[ends[chosen]] - sums[ends[chosen] - np.array(keys.sizes, dtype=np.int64)[chosen]]
    sized = np.array([keys.sizes[t] << 1 for t in big], dtype=np.uint64)
    return tuple(int(v) for v in _mix(totals ^ sized ^ np.uint64(salt)))


@dataclass
class CopyCounts:
    """Work done by the copy check in this process, for tests and benchmarks."""

    checks: int = 0
    """Results checked (``psyche.daemon.rounds.copied_from`` calls)."""
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


@dataclass(eq=False)
class CopyIndex(Generic[T]):
    """The sketches of one round's held results, looked up in O(1) per result."""

    entries: list[T] = field(default_factory=list)
    """The held results, in the order they were added."""
    _exact: dict[bytes, list[int]] = field(default_factory=dict)
    _bands: dict[int, int] = field(default_factory=dict)
    """Band key → the first entry with it (most buckets hold one); the rest in ``_more``."""
    _more: dict[int, list[int]] = field(default_factory=dict)
    _tensors: dict[int, list[int]] = field(default_factory=dict)
    _schemes: list[tuple[int, int] | None] = field(default_factory=list)
    _bins: U64 = field(default_factory=lambda: np.empty((0, BINS), dtype=np.uint64))

    def add(self, entry: T, sk: CopySketch) -> None:
        """Hold ``entry``, whose sketch is ``sk``."""
        seq = len(self.entries)
        self.entries.append(entry)
        self._exact.setdefault(sk.fingerprint, []).append(seq)
        for key in sk.bands:
            if self._bands.setdefault(key, seq) != seq:
                self._more.setdefault(key, []).append(seq)
        for key in sk.tensors:
            self._tensors.setdefault(key, []).append(seq)
        self._schemes.append(sk.scheme if sk.bins is not None else None)
        if seq >= self._bins.shape[0]:
            grown = np.full((max(8, 2 * seq), BINS), EMPTY, dtype=np.uint64)
            grown[:seq] = self._bins[:seq]
            self._bins = grown
        if sk.bins is not None:
            self._bins[seq] = sk.bins

    def exact(self, sk: CopySketch) -> list[T]:
        """The held entries with ``sk``'s fingerprint, in the order they were added."""
        return [self.entries[i] for i in self._exact.get(sk.fingerprint, ())]

    def near(self, sk: CopySketch) -> list[T]:
        """The held entries that may be near duplicates of ``sk``'s result, in the order they
        were added: those sharing a large tensor's key set, and those sharing an LSH band and
        at least ``AGREE_MIN`` bins. Every entry the exact rule accepts is among them, but for
        the probabilities in the module docstring."""
        found = set(_union(self._tensors, sk.tensors))
        banded = {self._bands[k] for k in sk.bands if k in self._bands}
        banded.update(_union(self._more, sk.bands))
        banded -= found
        COUNTS.band_candidates += len(banded)
        if banded and sk.bins is not None:
            same = [i for i in sorted(banded) if self._schemes[i] == sk.scheme]
            if same:
                rows = self._bins[np.array(same, dtype=np.int64)]
                agree = ((rows == sk.bins) & (sk.bins != EMPTY)).sum(axis=1)
                found.update(i for i, a in zip(same, agree.tolist(), strict=True) if a >= AGREE_MIN)
        COUNTS.candidates += len(found)
        return [self.entries[i] for i in sorted(found)]


def _union(buckets: dict[int, list[int]], keys: Iterable[int]) -> Iterable[int]:
    for key in keys:
        yield from buckets.get(key, ())
