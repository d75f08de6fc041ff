"""The ``DataProvider`` seam and the sample index shared by the file-backed providers.

Trainers ask for samples by id: ``get_samples(BatchId(a, b))`` returns an int64 tensor of shape
``[b - a + 1, seq_len]``, one row per sample id in the closed interval, each row exactly
``seq_len`` tokens (the model shifts labels itself; docs/protocol.md, "Data providers"). Which ids
a client trains is a pure function of the round (``psyche.protocol.data_selection``); providers
only map ids to tokens, so every honest client, and the data server, must map an id to the same
tokens.

Sample index (local and HTTP providers; the rule every client must reproduce):

1. Files are taken in the order their provider documents (local: sorted by file name; HTTP: the
   URL order of the config, or sorted object names for a bucket listing).
2. File ``f`` holding ``T_f`` tokens contributes ``T_f // seq_len`` sequences at token offsets
   ``0, seq_len, 2·seq_len, …``. *Every* full sequence counts; the reference's strict ``<`` dropped
   the last one of each file (docs/protocol.md, "Known flaws of the reference", flaw 18). Tokens
   after the last full sequence are unused.
3. The sequences of all files are concatenated into pointers ``0 … N-1``.
4. Sample ids wrap: id ``i`` reads pointer ``p = i mod N``. An epoch's data index keeps growing
   across runs longer than one pass over the data, and wrapping replays the corpus instead of
   failing a round. ``N == 0`` is an error at construction.
5. ``DontShuffle``: pointer ``p``. ``Seeded(seed32)``: pointer
   ``compute_shuffled_index(p, N, sha256(seed32 ‖ b"psyche-data-shuffle"))`` — the 90-round
   swap-or-not shuffle (``psyche.protocol.shuffle``; docs/protocol.md, "Swap-or-not shuffle").

Why swap-or-not instead of the reference's ChaCha8 Fisher–Yates or a NumPy permutation: HTTP
clients shuffle independently and must agree bit for bit, and NumPy's ``Generator`` streams are
not promised stable across releases (NEP 19); rand_chacha internals are hard to port
(docs/protocol.md, "Known flaws of the reference", flaw 18). Swap-or-not is already specified and
vector-tested, needs no O(N) permutation table (a 100 B-token corpus has ~50 M sequences), and is
evaluated lazily per id. Per-id cost is ≈180 SHA-256 calls, so :func:`shuffled_positions`
evaluates a batch round by round and reuses the hash blocks that contiguous ids share (a few
hashes per round instead of ~2 per id).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import DontShuffle, SeededShuffle, Shuffle
from psyche.protocol.shuffle import shuffled_positions

__all__ = [
    "SHUFFLE_DOMAIN",
    "DataError",
    "DataProvider",
    "DummyDataProvider",
    "SampleIndex",
    "shuffle_key",
    "tokens_to_tensor",
]

SHUFFLE_DOMAIN = b"psyche-data-shuffle"


class DataError(Exception):
    """Data could not be found, read, or validated; the message names the file or peer."""


@runtime_checkable
class DataProvider(Protocol):
    """Maps sample ids to token rows (callers use one thread at a time per provider)."""

    @property
    def seq_len(self) -> int:
        """Tokens per sample."""
        ...

    @property
    def num_samples(self) -> int:
        """Distinct samples before ids wrap around (``N`` in the module docstring)."""
        ...

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        """``int64`` tensor ``[batch_id.size, seq_len]``; raises :class:`DataError`."""
        ...


def shuffle_key(seed32: bytes) -> bytes:
    """Per-purpose swap-or-not seed for the sample shuffle."""
    if len(seed32) != 32:
        raise ValueError(f"shuffle seed must be 32 bytes, got {len(seed32)}")
    return hashlib.sha256(bytes(seed32) + SHUFFLE_DOMAIN).digest()


class SampleIndex:
    """Sample id → (file number, sequence number in that file), per the module docstring."""

    def __init__(self, seqs_per_file: Sequence[int], shuffle: Shuffle) -> None:
        self._starts: list[int] = []
        total = 0
        for count in seqs_per_file:
            self._starts.append(total)
            total += count
        if total == 0:
            raise DataError("the data holds no full sequence (files too short or no files)")
        self.num_samples = total
        if isinstance(shuffle, SeededShuffle):
            self._key: bytes | None = shuffle_key(bytes(shuffle.seed))
        elif isinstance(shuffle, DontShuffle):
            self._key = None
        else:
            raise DataError(f"unsupported shuffle {shuffle!r}")

    def pointers(self, batch_id: BatchId) -> list[int]:
        """Global sequence pointers for every id of ``batch_id``, in id order."""
        n = self.num_samples
        ids = [i % n for i in range(batch_id.start, batch_id.end + 1)]
        return ids if self._key is None else shuffled_positions(ids, n, self._key)

    def locate(self, pointer: int) -> tuple[int, int]:
        f = bisect.bisect_right(self._starts, pointer) - 1
        return f, pointer - self._starts[f]

    def runs(self, batch_id: BatchId) -> list[tuple[int, int, int, int]]:
        """``(file, first_seq, count, first_row)`` runs of consecutive sequences in one file.

        Rows ``first_row … first_row+count-1`` of the result are sequences ``first_seq …`` of
        ``file``, so a provider can read each run with one read (one HTTP range request).
        """
        runs: list[tuple[int, int, int, int]] = []
        for row, pointer in enumerate(self.pointers(batch_id)):
            f, seq = self.locate(pointer)
            if runs:
                rf, rseq, rcount, rrow = runs[-1]
                if rf == f and rseq + rcount == seq:
                    runs[-1] = (rf, rseq, rcount + 1, rrow)
                    continue
            runs.append((f, seq, 1, row))
        return runs


def tokens_to_tensor(rows: np.ndarray, seq_len: int) -> torch.Tensor:
    """Token array (any of the accepted dtypes) → ``int64 [n, seq_len]``; rejects negatives."""
    out = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64).reshape(-1, seq_len))
    if out.numel() and int(out.min()) < 0:
        raise DataError("negative token id in the data (an '<i4' file holding invalid ids?)")
    return out


class DummyDataProvider:
    """All-zero samples (the reference's ``Dummy`` data location); for smoke tests only."""

    def __init__(self, seq_len: int, num_samples: int = 1 << 20) -> None:
        if seq_len <= 0 or num_samples <= 0:
            raise ValueError("seq_len and num_samples must be positive")
        self._seq_len = seq_len
        self._num_samples = num_samples

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def num_samples(self) -> int:
        return self._num_samples

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        return torch.zeros((batch_id.size, self._seq_len), dtype=torch.int64)
