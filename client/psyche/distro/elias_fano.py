"""Elias–Fano coding of many equal-sized sorted index sets at once (payload v2's index code).

Why Elias–Fano (docs/protocol.md, "Payload v2: index coding"): a tile's top-k is a k-subset of
`[0, n)`, worth log2(C(n, k)) bits. Elias–Fano comes within a few bits per tile of that bound
(87 bits against 80.7 for 8 of 4,096), its size depends on `(n, k)` only, so a payload's length
is fixed by the model and config, and it codes and decodes with shifts, a scatter and a
`nonzero` over all tiles of a tensor at once. Enumerative coding reaches the bound but needs
81-bit integer arithmetic per tile, which numpy cannot vectorise.

Per tile, with the values sorted, `x_0 < x_1 < … < x_{k−1} < n`:

- low part: the `low_bits` least significant bits of each `x_i`, LSB first, `k·low_bits` bits;
- high part: a bit vector of `k + buckets − 1` bits (`buckets = ⌈n / 2^low_bits⌉`) with a one at
  position `(x_i >> low_bits) + i` for each `i` and zeros elsewhere.

Any placement of exactly `k` ones in the high part decodes to non-decreasing high halves below
`buckets`; the decoder then requires strictly increasing values below `n`, so every accepted bit
string is the coding of exactly one index set. With a single bucket (`2^low_bits ≥ n`) the high
part would be all ones, so it is left out and the code is plain fixed-width binary. `low_bits` is
the one of smallest total size (the smallest on ties), so it too is a function of `(n, k)`. When
`k = n` the set is all of `[0, n)` and takes no bits.

Bits are numpy `uint8` arrays of 0/1 here; the payload packs them 8 per byte.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["EliasFano", "EliasFanoError"]

Bits = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]


class EliasFanoError(ValueError):
    """A bit string that is not the coding of any sorted set of distinct indices below `n`."""


@dataclass(frozen=True, slots=True)
class EliasFano:
    """The code of k-subsets of `[0, n)`: its parameters and its size per tile."""

    n: int
    k: int
    low_bits: int
    high_bits: int

    @classmethod
    def for_tile(cls, n: int, k: int) -> EliasFano:
        """The code for `k` of `n` (cached: a model has a handful of tile sizes)."""
        return _for_tile(n, k)

    @classmethod
    def _search(cls, n: int, k: int) -> EliasFano:
        if not 1 <= k <= n:
            raise ValueError(f"need 1 ≤ k ≤ n, got k={k}, n={n}")
        if k == n:
            return cls(n, k, 0, 0)
        best: EliasFano | None = None
        for low in range(max(n - 1, 1).bit_length() + 1):
            buckets = ((n - 1) >> low) + 1
            # One bucket: the high part would be k ones whatever the set, so it is left out.
            candidate = cls(n, k, low, k + buckets - 1 if buckets > 1 else 0)
            if best is None or candidate.tile_bits < best.tile_bits:
                best = candidate
        assert best is not None
        return best

    @property
    def tile_bits(self) -> int:
        """Bits per tile (indices only)."""
        return self.k * self.low_bits + self.high_bits

    def encode(self, sorted_idx: Ints) -> Bits:
        """Bits of `tiles` index sets, shape `(tiles, k)`, each row strictly increasing, `< n`.

        Returns all tiles' low parts, then all tiles' high parts (two flat runs, so each is one
        reshape for the decoder). The caller has checked the rows; this only codes them.
        """
        tiles, k = sorted_idx.shape
        shifts = np.arange(self.low_bits, dtype=np.int64)
        low = ((sorted_idx[..., None] >> shifts) & 1).astype(np.uint8).reshape(-1)
        if self.high_bits == 0:
            return low
        high = np.zeros((tiles, self.high_bits), dtype=np.uint8)
        positions = (sorted_idx >> self.low_bits) + np.arange(k, dtype=np.int64)
        np.put_along_axis(high, positions, 1, axis=1)
        return np.concatenate([low, high.reshape(-1)])

    def decode(self, bits: Bits, tiles: int) -> Ints:
        """Inverse of `encode` for `tiles` tiles; `bits` has exactly `tiles · tile_bits` entries.

        Raises `EliasFanoError` unless every tile codes a strictly increasing set below `n`.
        """
        if bits.shape != (tiles * self.tile_bits,) or not self.high_bits:
            return self._decode(bits, tiles)
        # The same checks and values as `_decode` in fewer numpy calls (issue 38: a payload's
        # decode was mostly their per-call cost): the high part's ones found in one flat pass,
        # the low parts summed by a float matrix product (exact: sums of distinct powers of two
        # below 2⁵³). Anything it would refuse goes to `_decode`, which names the defect.
        k, low_bits = self.k, self.low_bits
        split = tiles * k * low_bits
        weights = np.ldexp(1.0, np.arange(low_bits))
        low = np.dot(bits[:split].reshape(tiles * k, low_bits).astype(np.float64), weights)
        found = np.flatnonzero(bits[split:])
        if found.size != tiles * k:
            return self._decode(bits, tiles)
        ones = found.reshape(tiles, k)
        row_start = np.arange(0, tiles * self.high_bits, self.high_bits, dtype=np.int64)
        # Sorted, so every row holds exactly k ones iff each row's first and last are its own.
        if not bool((ones[:, 0] >= row_start).all()) or not bool(
            (ones[:, -1] < row_start + self.high_bits).all()
        ):
            return self._decode(bits, tiles)
        high = ones - row_start[:, None]
        high -= np.arange(k, dtype=np.int64)
        values: Ints = low.astype(np.int64).reshape(tiles, k) | (high << low_bits)
        if (k > 1 and not bool((values[:, 1:] > values[:, :-1]).all())) or not bool(
            (values[:, -1] < self.n).all()
        ):
            return self._decode(bits, tiles)
        return values

    def _decode(self, bits: Bits, tiles: int) -> Ints:
        """`decode` one check at a time, naming the first defect."""
        k = self.k
        if bits.shape != (tiles * self.tile_bits,):
            raise EliasFanoError(f"expected {tiles * self.tile_bits} bits, got {bits.shape}")
        if self.tile_bits == 0:
            return np.broadcast_to(np.arange(k, dtype=np.int64), (tiles, k)).copy()
        split = tiles * k * self.low_bits
        weights = np.left_shift(1, np.arange(self.low_bits, dtype=np.int64))
        values: Ints = bits[:split].reshape(tiles, k, self.low_bits).astype(np.int64) @ weights
        if self.high_bits:
            high = bits[split:].reshape(tiles, self.high_bits)
            ones = high.sum(axis=1, dtype=np.int64)
            if not bool((ones == k).all()):
                tile = int(np.flatnonzero(ones != k)[0])
                raise EliasFanoError(f"tile {tile}: {int(ones[tile])} high-part ones, expected {k}")
            # Row-major `nonzero`: the rows come in order and each row's columns ascending, so
            # every row holds its k positions sorted.
            columns = np.nonzero(high)[1].reshape(tiles, k)
            values |= (columns - np.arange(k, dtype=np.int64)) << self.low_bits
        if k > 1 and not bool((values[:, 1:] > values[:, :-1]).all()):
            tile = int(np.flatnonzero((values[:, 1:] <= values[:, :-1]).any(axis=1))[0])
            raise EliasFanoError(f"tile {tile}: indices are not strictly increasing")
        if not bool((values[:, -1] < self.n).all()):
            tile = int(np.flatnonzero(values[:, -1] >= self.n)[0])
            raise EliasFanoError(
                f"tile {tile}: index {int(values[tile, -1])} is not below {self.n}"
            )
        return values


@functools.lru_cache(maxsize=256)
def _for_tile(n: int, k: int) -> EliasFano:
    return EliasFano._search(n, k)
