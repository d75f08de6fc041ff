"""Deterministic shuffles every client must reproduce bit for bit.

See docs/protocol.md, "Swap-or-not shuffle" and "Data assignment".

Two different shuffles are used, for two different jobs:

* ``compute_shuffled_index`` is the Ethereum-2 *swap-or-not* shuffle (90 rounds). It maps one
  index to its shuffled position without materialising the whole permutation, so a verifier can
  check one committee or witness proof in O(rounds) hashes. The price is ~180 SHA-256 calls per
  index, which is fine for the ≤256 clients of a run but would be slow for shuffling large lists.
* ``deterministic_shuffle`` is a Fisher–Yates shuffle driven by a 64-bit LCG. It is cheap and is
  used to order trainers before data assignment. The LCG is statistically weak (low bits have
  short periods, ``j = next() mod (i+1)`` is slightly biased); we keep it anyway because it is the
  reference's algorithm and the data assignment must match it exactly.

All integers are unsigned 64-bit on the Rust side, so inputs are range-checked here instead of
silently wrapping: a Python caller passing a negative seed should fail loudly, not diverge.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

__all__ = [
    "LCG_INCREMENT",
    "LCG_MULTIPLIER",
    "SHUFFLE_ROUNDS",
    "Lcg",
    "compute_shuffled_index",
    "deterministic_shuffle",
    "shuffled_positions",
]

T = TypeVar("T")

SHUFFLE_ROUNDS = 90
LCG_MULTIPLIER = 6364136223846793005
LCG_INCREMENT = 1442695040888963407

_U64_MASK = (1 << 64) - 1
_U32_MASK = (1 << 32) - 1
_SEED_LEN = 32


def _check_u64(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= _U64_MASK:
        raise ValueError(f"{name} must fit in an unsigned 64-bit integer, got {value}")


def compute_shuffled_index(index: int, n: int, seed: bytes) -> int:
    """Return the position of ``index`` in the swap-or-not permutation of ``range(n)``.

    ``seed`` is the 32-byte per-purpose seed (e.g. ``sha256v(seed32, b"committee")``).
    Raises ``ValueError`` unless ``0 <= index < n`` and ``n`` fits in a u64.
    """
    _check_u64("n", n)
    _check_u64("index", index)
    if index >= n:
        raise ValueError(f"index {index} is out of range for a shuffle of {n} items")
    if len(seed) != _SEED_LEN:
        raise ValueError(f"shuffle seed must be {_SEED_LEN} bytes, got {len(seed)}")
    seed = bytes(seed)
    for r in range(SHUFFLE_ROUNDS):
        round_byte = bytes((r,))
        # One hash prefix per round is shared by the pivot and the bit source.
        prefix = hashlib.sha256(seed)
        prefix.update(round_byte)
        pivot = int.from_bytes(prefix.copy().digest()[:8], "little") % n
        flip = (pivot + n - index) % n
        pos = max(index, flip)
        # The reference feeds pos/256 as a u64 truncated to its low 4 LE bytes.
        source = prefix.copy()
        source.update(((pos // 256) & _U32_MASK).to_bytes(4, "little"))
        digest = source.digest()
        bit = (digest[(pos % 256) // 8] >> (pos % 8)) & 1
        if bit:
            index = flip
    return index


def shuffled_positions(indices: Sequence[int], n: int, key: bytes) -> list[int]:
    """``[compute_shuffled_index(i, n, key) for i in indices]``, computed a round at a time.

    Every index of a round shares the round's pivot hash, and the bit-source hash is shared by
    the up to 256 positions of one block, so the whole permutation of ``n`` items costs
    ``SHUFFLE_ROUNDS × (1 + ⌈n/256⌉)`` hashes instead of ``2 × SHUFFLE_ROUNDS`` per index: a client
    that needs every client's committee (the round's data assignment) pays O(n) arithmetic and a
    few hundred hashes, not 180 hashes per client.
    """
    _check_u64("n", n)
    if len(key) != _SEED_LEN:
        raise ValueError(f"shuffle seed must be {_SEED_LEN} bytes, got {len(key)}")
    if any(not 0 <= i < n for i in indices):
        raise ValueError(f"indices must be in [0, {n})")
    if not indices:
        return []
    key = bytes(key)
    out = list(indices)
    for r in range(SHUFFLE_ROUNDS):
        prefix = hashlib.sha256(key)
        prefix.update(bytes((r,)))
        pivot = int.from_bytes(prefix.copy().digest()[:8], "little") % n
        sources: dict[int, bytes] = {}
        for k, index in enumerate(out):
            flip = (pivot + n - index) % n
            pos = max(index, flip)
            block = (pos // 256) & _U32_MASK
            digest = sources.get(block)
            if digest is None:
                h = prefix.copy()
                h.update(block.to_bytes(4, "little"))
                digest = sources[block] = h.digest()
            if (digest[(pos % 256) // 8] >> (pos % 8)) & 1:
                out[k] = flip
    return out


class Lcg:
    """64-bit linear congruential generator; ``next()`` advances and returns the new state."""

    __slots__ = ("_state",)

    def __init__(self, seed: int) -> None:
        _check_u64("seed", seed)
        self._state = seed

    @property
    def state(self) -> int:
        return self._state

    def next(self) -> int:
        self._state = (self._state * LCG_MULTIPLIER + LCG_INCREMENT) & _U64_MASK
        return self._state


def deterministic_shuffle(items: Sequence[T], seed: int) -> list[T]:
    """Fisher–Yates shuffle of a copy of ``items`` driven by ``Lcg(seed)``.

    The loop runs from the last index down to 1 and draws ``j = next() mod (i + 1)``; empty and
    one-element inputs draw nothing, so they come back unchanged.
    """
    rng = Lcg(seed)
    out = list(items)
    for i in range(len(out) - 1, 0, -1):
        j = rng.next() % (i + 1)
        out[i], out[j] = out[j], out[i]
    return out
