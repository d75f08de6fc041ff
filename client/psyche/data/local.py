"""``LocalDataProvider``: token files in one local directory, memory-mapped.

Used by single-machine runs, demos, tests and the TCP data server. Files are the token files
directly inside the directory (``.npy`` with a parsed header, raw ``.bin``/``.ds``; see
:mod:`psyche.data.tokenfiles`), **sorted by file name** so the sample order does not depend on the
filesystem. Sample ids map to sequences by the rule in :mod:`psyche.data.provider` (every full
sequence counts, ids wrap modulo the dataset, optional swap-or-not shuffle).

Files are opened as read-only ``numpy.memmap`` on first use (at most ``MAX_OPEN_FILES`` at a
time): nothing is loaded up front, the page cache is shared between processes serving the same
corpus, and a read touches only the pages of the requested sequences. Files are assumed not to
change while the provider is open.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from psyche.data.provider import DataError, SampleIndex, tokens_to_tensor
from psyche.data.tokenfiles import TokenLayout, list_token_files, read_local_layout
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import DontShuffle, Shuffle, TokenSize

__all__ = ["LocalDataProvider"]

log = logging.getLogger(__name__)

MAX_OPEN_FILES = 128


class LocalDataProvider:
    """Samples of ``seq_len`` tokens from the token files in ``directory``."""

    def __init__(
        self,
        directory: str | Path,
        seq_len: int,
        token_size: TokenSize = TokenSize.TwoBytes,
        shuffle: Shuffle | None = None,
    ) -> None:
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        self._dir = Path(directory)
        self._seq_len = seq_len
        self.files = list_token_files(self._dir)
        if not self.files:
            raise DataError(
                f"{self._dir}: no token files (*.npy, *.bin, *.ds); "
                "create some with `psyche data prepare`"
            )
        self._layouts: list[TokenLayout] = []
        self._maps: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        seqs: list[int] = []
        for path in self.files:
            try:
                layout = read_local_layout(path, token_size)
            except OSError as e:
                raise DataError(f"{path}: cannot read: {e.strerror}") from None
            self._layouts.append(layout)
            seqs.append(layout.sequences(seq_len))
            if layout.sequences(seq_len) == 0:
                log.warning("%s: fewer than %d tokens, contributes no sample", path, seq_len)
        self._index = SampleIndex(seqs, shuffle if shuffle is not None else DontShuffle())
        log.debug(
            "local data %s: %d files, %d samples of %d tokens",
            self._dir,
            len(self.files),
            self.num_samples,
            seq_len,
        )

    def _tokens(self, f: int) -> np.ndarray:
        """The memory map of file ``f``, from a small LRU cache.

        Each map holds a file descriptor, and corpora can have thousands of shards, so only
        :data:`MAX_OPEN_FILES` stay open. Only files with at least one sequence get here.
        """
        with self._lock:
            tokens = self._maps.get(f)
            if tokens is not None:
                self._maps.move_to_end(f)
                return tokens
            lay = self._layouts[f]
            try:
                tokens = np.memmap(
                    self.files[f], lay.dtype, "r", offset=lay.data_offset, shape=(lay.n_tokens,)
                )
            except OSError as e:
                raise DataError(f"{self.files[f]}: cannot map: {e.strerror}") from None
            self._maps[f] = tokens
            if len(self._maps) > MAX_OPEN_FILES:
                self._maps.popitem(last=False)
            return tokens

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def num_samples(self) -> int:
        return self._index.num_samples

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        L = self._seq_len
        out = np.empty((batch_id.size, L), dtype=np.int64)
        for f, seq, count, row in self._index.runs(batch_id):
            tokens = self._tokens(f)
            out[row : row + count] = tokens[seq * L : (seq + count) * L].reshape(count, L)
        return tokens_to_tensor(out, L)
