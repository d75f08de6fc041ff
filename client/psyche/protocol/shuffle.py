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
