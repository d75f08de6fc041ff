"""The copy check's inner loops, compiled: a result's MinHash sketch in one pass over its keys,
and the index's hash tables of band keys and tensor key-set hashes.

Why compiled (issue 38): on a result of a few thousand keys, numpy's cost per call — about
fifteen calls per sketch, each allocating — and Python dicts of 100,000 band keys per client at
256 clients were most of what the check cost (0.28–0.32 ms per result, 8–11 % of a client's
round at 256 clients); the arithmetic itself is a few nanoseconds per key. numba compiles these
few loops to machine code once and caches the result on disk (``cache=True``: next to this file,
or in the user's cache directory where that is read-only), so a process pays the compile only
the first time, and a later one loads it (about a second with numba's import). The functions
have explicit signatures, so a call with other dtypes is refused instead of compiling again.

What they compute is defined in ``psyche.distro.copy_index`` (the module docstring there); this
module only holds the loops. Everything is wrapping uint64 arithmetic: numba promotes a mix of
signed and unsigned integers to float, so every constant here is an explicit ``np.uint64``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["FREE", "HashTable", "mix", "sketch_into", "table_insert", "table_lookup"]

U64 = npt.NDArray[np.uint64]
FREE = np.uint64(2**64 - 1)
"""A hash table slot's value when the slot is free."""

_EMPTY = np.uint64(2**64 - 1)
_G = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)
_ONE = np.uint64(1)


@njit("uint64(uint64)", cache=True, nogil=True, inline="always")
def mix(x: np.uint64) -> np.uint64:
    """splitmix64's finaliser, on one value: the keys' hash, the tables' slot, and
    (``copy_index._mixed``) the plan's constants."""
    z = x + _G
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(
    "int64(uint64[::1], uint64[::1], uint64[::1], uint64, int64, uint64[::1], uint64[::1],"
    " int64[::1], int64[::1], uint64[::1], uint64[::1])",
    cache=True,
    nogil=True,
)
def sketch_into(
    keys: npt.NDArray[np.uint64],
    tensor_const: npt.NDArray[np.uint64],
    pass_mul: npt.NDArray[np.uint64],
    shift: np.uint64,
    per_pass: int,
    band_row: npt.NDArray[np.uint64],
    band_const: npt.NDArray[np.uint64],
    rep_first: npt.NDArray[np.int64],
    rep_end: npt.NDArray[np.int64],
    bins: npt.NDArray[np.uint64],
    out: npt.NDArray[np.uint64],
) -> int:
    """Fill ``bins`` (one per pass and bin: ``pass_mul.size · per_pass`` values) with the keys'
    MinHash values; write to ``out`` the keys of the bands (over the first ``band_const.size ·
    band_row.size`` bins) that have no empty bin, in band order, then the key-set hash of each
    ``[rep_first[t], rep_end[t])`` range; return how many bands were written. ``shift`` 64 means
    one bin per pass."""
    n = keys.size
    bins[:] = _EMPTY
    hashed = np.empty(n, dtype=np.uint64)
    whole = shift < np.uint64(64)
    for i in range(n):
        h0 = mix(keys[i] ^ tensor_const[i])
        hashed[i] = h0
        for p in range(pass_mul.size):
            h = h0 * pass_mul[p]
            slot = p * per_pass
            if whole:
                slot += int(h >> shift)
            # min(), not a comparison and a store: whether a key lowers its bin is a coin flip
            # a branch predictor cannot learn (2.5x the loop's time when it mispredicts).
            bins[slot] = min(h, bins[slot])
    rows = band_row.size
    written = 0
    for j in range(band_const.size):
        key = band_const[j]
        filled = True
        for r in range(rows):
            value = bins[j * rows + r]
            if value == _EMPTY:
                filled = False
            key += value * band_row[r]
        if filled:
            out[written] = key
            written += 1
    for t in range(rep_first.size):
        total = np.uint64(0)
        for i in range(rep_first[t], rep_end[t]):
            total += hashed[i]
        out[written + t] = total
    return written


@njit("void(uint64[::1], uint64[::1], uint64[::1])", cache=True, nogil=True)
def table_insert(
    slots: npt.NDArray[np.uint64], keys: npt.NDArray[np.uint64], values: npt.NDArray[np.uint64]
) -> None:
    """Put ``(keys[i], values[i])`` in the open-addressed table ``slots`` (slot ``s`` is
    ``slots[2s]``, its key, and ``slots[2s + 1]``, its value or ``FREE``; linear probing; a key
    may be present many times, once per value). The caller keeps the table at most half full,
    so a probe ends at a free slot."""
    mask = np.uint64(slots.size // 2 - 1)
    for i in range(keys.size):
        slot = mix(keys[i]) & mask
        while slots[2 * slot + _ONE] != FREE:
            slot = (slot + _ONE) & mask
        slots[2 * slot] = keys[i]
        slots[2 * slot + _ONE] = values[i]


@njit("int64(uint64[::1], uint64[::1], uint64[::1])", cache=True, nogil=True)
def _probe(
    slots: npt.NDArray[np.uint64], keys: npt.NDArray[np.uint64], out: npt.NDArray[np.uint64]
) -> int:
    """How many (key, value) pairs the table holds for ``keys``; their values go to ``out``
    while it has room."""
    mask = np.uint64(slots.size // 2 - 1)
    found = 0
    for i in range(keys.size):
        slot = mix(keys[i]) & mask
        while slots[2 * slot + _ONE] != FREE:
            if slots[2 * slot] == keys[i]:
                if found < out.size:
                    out[found] = slots[2 * slot + _ONE]
                found += 1
            slot = (slot + _ONE) & mask
    return found


def table_lookup(slots: npt.NDArray[np.uint64], keys: npt.NDArray[np.uint64]) -> U64:
    """Every value stored under any of ``keys``, once per (key, value) pair found. (The buffer
    is the caller's and sized by a first probe when too small: an array grown inside the loop
    made every iteration manage its reference count, 10x the probes' cost.)"""
    out = np.empty(64, dtype=np.uint64)
    found = _probe(slots, keys, out)
    if found > out.size:
        out = np.empty(found, dtype=np.uint64)
        _probe(slots, keys, out)
    return out[:found]


class HashTable:
    """uint64 keys to uint64 values (any but ``FREE``), a key present once per value it was
    added with, kept at most half full (doubling when it would not be); a slot's key and value
    side by side, so that a probe of a table out of the caches misses once, not twice.
    ``psyche.distro.copy_index.CopyIndex``'s table of band and tensor keys."""

    __slots__ = ("count", "slots")

    def __init__(self, capacity: int = 1024) -> None:
        self.slots = self._empty(1 << max(4, (capacity - 1).bit_length()))
        self.count = 0

    @property
    def capacity(self) -> int:
        return self.slots.size // 2

    def add(self, keys: U64, values: U64) -> None:
        """Store ``values[i]`` under ``keys[i]`` (contiguous uint64 arrays of one length)."""
        if 2 * (self.count + keys.size) > self.capacity:
            self._grow(2 * (self.count + keys.size))
        table_insert(self.slots, keys, values)
        self.count += keys.size

    def find(self, keys: U64) -> U64:
        """Every value stored under any of ``keys``, once per (key, value) pair."""
        return table_lookup(self.slots, keys)

    def _grow(self, need: int) -> None:
        pairs = self.slots.reshape(-1, 2)
        used = pairs[pairs[:, 1] != FREE]
        self.slots = self._empty(1 << (need - 1).bit_length())
        table_insert(self.slots, np.ascontiguousarray(used[:, 0]), np.ascontiguousarray(used[:, 1]))

    @staticmethod
    def _empty(capacity: int) -> U64:
        slots = np.zeros(2 * capacity, dtype=np.uint64)
        slots[1::2] = FREE
        return slots
