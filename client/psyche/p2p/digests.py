"""What a blob's id is the hash of: SHA-256 for everything the protocol names by content
(results, checkpoints, model shards), BLAKE3 for the SparseLoCo audit's inner states.

Why two: a SparseLoCo trainer that is audited hashes H + 1 model-sized states and two error
buffers every round, whether or not anyone asks for them, and SHA-256 at ~1.4 GB/s made that
the larger part of what auditing cost it (bench/README.md, "SparseLoCo audit"); BLAKE3 on one
thread is ~4x faster. Everything else keeps SHA-256, which the rest of the protocol (result
commitments, checkpoint manifests) already names. A fetch says which one its id is, and both
the host (while streaming) and the node (again, locally) check the bytes with it.
"""

from __future__ import annotations

import enum
import hashlib
from typing import Protocol

import blake3

__all__ = ["Digest", "Hasher", "digest_of", "hasher"]


class Digest(enum.Enum):
    sha256 = "sha256"
    blake3 = "blake3"


class Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> object: ...
    def digest(self) -> bytes: ...


def hasher(kind: Digest = Digest.sha256) -> Hasher:
    """A fresh incremental hasher of ``kind``; BLAKE3 on one thread (the caller's)."""
    if kind is Digest.blake3:
        return blake3.blake3()
    return hashlib.sha256()


def digest_of(data: bytes | memoryview, kind: Digest = Digest.sha256) -> bytes:
    """``data``'s 32-byte id under ``kind``."""
    h = hasher(kind)
    h.update(data)
    return h.digest()
