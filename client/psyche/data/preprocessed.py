"""``PreprocessedDataProvider``: pre-tokenized sequences in Parquet files (``Preprocessed(path)``).

The format is the reference's: each row is one sample, and the ``inputs`` column (a list of
integers) holds exactly ``seq_len`` token ids. ``labels``, ``position_ids`` and
``sequence_lengths`` may be present (finetuning sets carry them); this client trains on
``inputs`` alone, as it does for every other location (the model shifts the labels itself), so
they are accepted and not read.

``path`` is a local ``.parquet`` file or a directory whose ``*.parquet`` files (directly inside
it) are taken **sorted by file name**, rows in file order, so every client numbers the rows the
same way. Sample id ``i`` reads row ``i mod N`` (ids wrap like the other providers'). The
location carries no shuffle: a preprocessed set is shuffled when it is made.

The ``inputs`` columns are read once at construction into one array: preprocessed sets are
finetuning-sized, and a row then costs a copy, not a Parquet decode, on every round. A Hugging
Face dataset id is not downloaded at run time; the error says how to fetch its files.

Parquet is read with ``pyarrow``, imported only when such a location is opened.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psyche.data.provider import DataError, SampleIndex, tokens_to_tensor
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import DontShuffle

__all__ = ["INPUTS_COLUMN", "PreprocessedDataProvider", "parquet_files"]

log = logging.getLogger(__name__)

INPUTS_COLUMN = "inputs"
PARQUET_SUFFIX = ".parquet"


def parquet_files(path: str | Path) -> list[Path]:
    """The Parquet files ``path`` names, in the order their rows are numbered."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise DataError(
            f"Preprocessed data {str(path)!r} is not a local file or directory (this client "
            "downloads nothing at run time: fetch a Hugging Face dataset's parquet files first, "
            "e.g. `huggingface-cli download --repo-type dataset ID --local-dir DIR`)"
        )
    files = sorted(f for f in p.iterdir() if f.suffix == PARQUET_SUFFIX and f.is_file())
    if not files:
        raise DataError(f"{p}: no {PARQUET_SUFFIX} files in the directory")
    return files


def _pyarrow() -> tuple[Any, Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            "Preprocessed data needs the pyarrow package, which this installation lacks "
            "(pip install pyarrow)"
        ) from None
    return pa, pc, pq


def _read_inputs(file: Path, seq_len: int) -> np.ndarray:
    """``int64 [rows, seq_len]`` from ``file``'s ``inputs`` column, every row checked."""
    pa, pc, pq = _pyarrow()
    try:
        parquet = pq.ParquetFile(file)
        if INPUTS_COLUMN not in parquet.schema_arrow.names:
            raise DataError(f"{file}: no `{INPUTS_COLUMN}` column")
        table = parquet.read(columns=[INPUTS_COLUMN])
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{file}: not a readable Parquet file ({e})") from None
    column = table.column(INPUTS_COLUMN).combine_chunks()
    kind = column.type
    if not (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ) or not pa.types.is_integer(kind.value_type):
        raise DataError(f"{file}: `{INPUTS_COLUMN}` is {kind}, not a list of integers")
    if column.null_count:
        raise DataError(f"{file}: `{INPUTS_COLUMN}` has {column.null_count} null rows")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(lengths != seq_len)
    if bad.size:
        row = int(bad[0])
        raise DataError(
            f"{file}: row {row}: `{INPUTS_COLUMN}` has {int(lengths[row])} tokens, the run's "
            f"max_seq_len is {seq_len}"
        )
    values = pc.list_flatten(column)
    if values.null_count:
        raise DataError(f"{file}: `{INPUTS_COLUMN}` holds null token ids")
    tokens = values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if tokens.size and int(tokens.min()) < 0:
        raise DataError(f"{file}: negative token id in `{INPUTS_COLUMN}`")
    return tokens.reshape(len(column), seq_len)


class PreprocessedDataProvider:
    """Samples of ``seq_len`` tokens from the ``inputs`` rows of Parquet files."""

    def __init__(self, path: str | Path, seq_len: int) -> None:
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        self._seq_len = seq_len
        self.files = parquet_files(path)
        parts = [_read_inputs(f, seq_len) for f in self.files]
        self._rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
        self._index = SampleIndex([len(self._rows)], DontShuffle())
        log.debug("preprocessed data %s: %d files, %d samples", path, len(parts), len(self._rows))

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def num_samples(self) -> int:
        return self._index.num_samples

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        rows = self._rows[self._index.pointers(batch_id)]
        return tokens_to_tensor(rows, self._seq_len)
