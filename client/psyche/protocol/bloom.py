"""The witness bloom filter: our improved variant of the reference's ``Bloom<16, 8>``.

See docs/protocol.md, "Bloom filter".

Witnesses fold "which trainers delivered" and "which payload hashes arrived" into bloom filters and
send them to the coordinator, which counts votes from them. The reference uses 1024 bits for up to
256 items, a false-positive rate of ~31 % at full size (docs/protocol.md,
"Known flaws of the reference", flaw 2), which makes health checks and consensus unreliable in large
runs. We change two things:

* **3072 bits** (48 u64 words), still 8 hash functions. With ``n`` items the false-positive
  rate is about ``(1 - e^(-8n/3072))^8``: ~0.3 % at n = 256 (the maximum number of clients),
  ~0.004 % at n = 128, under one in a million at n = 64 (the reference: 31 % at n = 256).
  Eight keys is close to optimal (``k = m/n · ln 2 ≈ 8.3`` at n = 256). The filter costs
  392 bytes on the wire instead of 192, so a stored witness (two filters) grows accordingly.
* **One 64-bit seed** instead of eight stored keys: the 8 keys are the first 8 outputs of a
  splitmix64 generator started at ``seed``. This saves 56 bytes per filter and makes the keys
  well mixed even for a poorly chosen seed (0, 1, …). A witness should still pick its seed at
  random per round so an adversary cannot precompute colliding items.

Item hashing is unchanged from the reference: FNV-1a 64 with the offset basis replaced by the
key, position ``h mod 3072``, bit ``i`` is bit ``i % 64`` (LSB first) of word ``i // 64``.
FNV is not collision resistant, but items are SHA-256 outputs chosen by honest witnesses from
data they saw, and the per-round random seed keeps collisions from being targeted in advance.

Encodings (both strict, because filters arrive from untrusted peers): bytes = seed u64 LE then
the 48 words u64 LE (392 bytes); JSON = ``{"seed": int, "words": [48 ints]}``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

__all__ = ["Bloom", "fnv1a64", "splitmix64_keys"]

_U64_MASK = (1 << 64) - 1
_FNV_PRIME = 0x100000001B3
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_UNPACK = struct.Struct("<49Q").unpack
"""A bloom's bytes: its seed and 48 words, little-endian u64s."""


def _is_u64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _U64_MASK


def splitmix64_keys(seed: int, count: int) -> tuple[int, ...]:
    """The first ``count`` outputs of splitmix64 with its state starting at ``seed``."""
    if not _is_u64(seed):
        raise ValueError(f"bloom seed must be an unsigned 64-bit integer, got {seed!r}")
    state = seed
    keys = []
    for _ in range(count):
        state = (state + _GOLDEN_GAMMA) & _U64_MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64_MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64_MASK
        keys.append(z ^ (z >> 31))
    return tuple(keys)


def fnv1a64(key: int, item: bytes) -> int:
    """FNV-1a 64 over ``item`` with ``key`` in place of the offset basis."""
    h = key
    for b in item:
        h = ((h ^ b) * _FNV_PRIME) & _U64_MASK
    return h


class Bloom:
    """A 3072-bit, 8-key bloom filter whose keys derive from one 64-bit seed. Mutable."""

    BITS: ClassVar[int] = 3072
    WORDS: ClassVar[int] = 48
    KEYS: ClassVar[int] = 8
    BYTES_LEN: ClassVar[int] = 8 + 8 * 48

    __slots__ = ("_keys", "_seed", "_words")

    def __init__(self, seed: int, words: Sequence[int] | None = None) -> None:
        self._keys = splitmix64_keys(seed, self.KEYS)
        self._seed = seed
        if words is None:
            self._words = [0] * self.WORDS
        else:
            if isinstance(words, str | bytes) or len(words) != self.WORDS:
                raise ValueError(f"a bloom filter has {self.WORDS} words")
            if not all(_is_u64(w) for w in words):
                raise ValueError("bloom words must be unsigned 64-bit integers")
            self._words = list(words)

    @classmethod
    def empty(cls, seed: int = 0) -> Bloom:
        return cls(seed)

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def keys(self) -> tuple[int, ...]:
        return self._keys

    @property
    def words(self) -> tuple[int, ...]:
        return tuple(self._words)

    def positions(self, item: bytes) -> tuple[int, ...]:
        """The bit positions ``item`` maps to, one per key (may repeat)."""
        return tuple(fnv1a64(k, item) % self.BITS for k in self._keys)

    def add(self, item: bytes) -> None:
        for pos in self.positions(item):
            self._words[pos >> 6] |= 1 << (pos & 63)

    def add_all(self, items: Iterable[bytes]) -> None:
        for item in items:
            self.add(item)

    def contains(self, item: bytes) -> bool:
        # Hash lazily: most absent items miss on the first or second key.
        for k in self._keys:
            pos = fnv1a64(k, item) % self.BITS
            if not (self._words[pos >> 6] >> (pos & 63)) & 1:
                return False
        return True

    def __contains__(self, item: object) -> bool:
        return isinstance(item, bytes | bytearray | memoryview) and self.contains(bytes(item))

    def is_empty(self) -> bool:
        return not any(self._words)

    def to_bytes(self) -> bytes:
        return b"".join(v.to_bytes(8, "little") for v in (self._seed, *self._words))

    @classmethod
    def from_bytes(cls, data: bytes) -> Bloom:
        if len(data) != cls.BYTES_LEN:
            raise ValueError(f"a bloom filter is {cls.BYTES_LEN} bytes, got {len(data)}")
        # Every value unpacked from 8 bytes is an unsigned 64-bit integer, so the constructor's
        # check of each word is skipped: a client decodes every witness's blooms in every
        # coordinator state it receives, and that check was most of it (issue 38).
        seed, *words = _UNPACK(data)
        bloom = cls.__new__(cls)
        bloom._keys = splitmix64_keys(seed, cls.KEYS)
        bloom._seed = seed
        bloom._words = words
        return bloom

    def to_json(self) -> dict[str, Any]:
        return {"seed": self._seed, "words": list(self._words)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Bloom:
        if not isinstance(obj, Mapping) or set(obj) != {"seed", "words"}:
            raise ValueError('a bloom filter JSON object has exactly the keys "seed" and "words"')
        words = obj["words"]
        if not isinstance(words, list):
            raise ValueError("bloom words must be a JSON list")
        return cls(obj["seed"], words)

    def copy(self) -> Bloom:
        return Bloom(self._seed, self._words)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bloom):
            return NotImplemented
        return self._seed == other._seed and self._words == other._words

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        ones = sum(w.bit_count() for w in self._words)
        return f"Bloom(seed={self._seed}, bits_set={ones}/{self.BITS})"
