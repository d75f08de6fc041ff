"""Token files: which files hold tokens, and where inside a file the tokens start.

A token file is a flat array of little-endian token ids. Two layouts are accepted:

* ``.npy`` with a NumPy header (format versions 1, 2 and 3). The header is parsed, not skipped
  blindly: ``descr`` must be ``'<u2'``, ``'<u4'`` or ``'<i4'`` (little-endian; anything else is
  a :class:`DataError` naming the file), ``fortran_order`` must be false, and the token count is
  the product of ``shape``, so a 2-D C-order array is read as its flattened tokens. The file's
  own dtype wins over the configured :class:`TokenSize`.
* Raw ``.bin`` / ``.ds`` files, and ``.npy`` files that do *not* start with the NumPy magic (the
  reference's "nanoset" files are raw despite their name), hold u16 (``TwoBytes``) or u32
  (``FourBytes``) tokens with no header, as the run config says. A trailing partial token is
  ignored.

The reference read ``.npy`` headers as tokens (docs/protocol.md, "Known flaws of the reference",
flaw 18); we parse them. Only the first bytes of a file are needed to find its layout, so the HTTP
provider can probe remote files with one small range request.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from psyche.data.provider import DataError
from psyche.protocol.locations import TokenSize

__all__ = [
    "DATA_EXTENSIONS",
    "NPY_MAGIC",
    "NPY_PROBE_BYTES",
    "TokenLayout",
    "has_data_extension",
    "layout_from_head",
    "list_token_files",
    "npy_header_end",
    "raw_dtype",
    "read_local_layout",
]

DATA_EXTENSIONS = (".npy", ".bin", ".ds")
NPY_MAGIC = b"\x93NUMPY"
NPY_PROBE_BYTES = 4096
"""Bytes read from the start of a file to find its layout; enough for any header NumPy writes
for a flat array (the header is padded to 64 bytes and is ~128 bytes in practice)."""
_MAX_NPY_HEADER = 1 << 20
_DTYPES: dict[str, np.dtype[np.integer]] = {
    "<u2": np.dtype("<u2"),
    "<u4": np.dtype("<u4"),
    "<i4": np.dtype("<i4"),
}


@dataclass(frozen=True, slots=True)
class TokenLayout:
    """Where the tokens of one file are: ``n_tokens`` items of ``dtype`` from ``data_offset``."""

    dtype: np.dtype[np.integer]
    data_offset: int
    n_tokens: int

    @property
    def itemsize(self) -> int:
        return int(self.dtype.itemsize)

    def sequences(self, seq_len: int) -> int:
        """Full sequences of ``seq_len`` tokens in the file (every one counts)."""
        return self.n_tokens // seq_len


def has_data_extension(name: str) -> bool:
    return name.lower().endswith(DATA_EXTENSIONS)


def raw_dtype(token_size: TokenSize) -> np.dtype[np.integer]:
    return np.dtype("<u2") if token_size is TokenSize.TwoBytes else np.dtype("<u4")


def npy_header_end(head: bytes, name: str) -> int | None:
    """Offset of the first token in a ``.npy`` file, from its first 12 bytes.

    ``None`` means the bytes do not start with the NumPy magic (a raw file).
    """
    if not head.startswith(NPY_MAGIC):
        return None
    if len(head) < 12:
        raise DataError(f"{name}: truncated .npy header")
    major = head[6]
    if major == 1:
        end = 10 + int.from_bytes(head[8:10], "little")
    elif major in (2, 3):
        end = 12 + int.from_bytes(head[8:12], "little")
    else:
        raise DataError(f"{name}: unsupported .npy format version {major}.{head[7]}")
    if end > _MAX_NPY_HEADER:
        raise DataError(f"{name}: .npy header of {end} bytes is implausibly large")
    return end


def _parse_npy_dict(text: str, name: str) -> tuple[np.dtype[np.integer], int]:
    try:
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise DataError(f"{name}: .npy header is not a Python literal: {text[:80]!r}") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise DataError(f"{name}: .npy header must have exactly descr, fortran_order and shape")
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if not isinstance(descr, str) or descr not in _DTYPES:
        raise DataError(
            f"{name}: .npy dtype {descr!r} is not a token dtype; use little-endian "
            f"'<u2', '<u4' or '<i4' (e.g. arr.astype('<u2'))"
        )
    if fortran is not False:
        raise DataError(f"{name}: .npy fortran_order must be False")
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise DataError(f"{name}: .npy shape {shape!r} is not a tuple of sizes")
    return _DTYPES[descr], math.prod(shape)


def layout_from_head(name: str, head: bytes, file_size: int, token_size: TokenSize) -> TokenLayout:
    """The layout of ``name`` (size ``file_size``) from its first bytes ``head``.

    ``head`` must hold the whole NumPy header when there is one: read ``NPY_PROBE_BYTES``, and if
    :func:`npy_header_end` says the header is longer, read that much.
    """
    end = npy_header_end(head, name) if name.lower().endswith(".npy") else None
    if end is None:
        dtype = raw_dtype(token_size)
        return TokenLayout(dtype, 0, file_size // dtype.itemsize)
    if len(head) < end:
        raise DataError(f"{name}: .npy header needs {end} bytes, file has {len(head)}")
    version = head[6]
    encoding = "utf-8" if version == 3 else "latin-1"
    start = 10 if version == 1 else 12
    dtype, n_tokens = _parse_npy_dict(head[start:end].decode(encoding), name)
    if end + n_tokens * dtype.itemsize > file_size:
        raise DataError(
            f"{name}: .npy header declares {n_tokens} tokens but the file has only "
            f"{max(0, file_size - end) // dtype.itemsize} (truncated file?)"
        )
    return TokenLayout(dtype, end, n_tokens)


def read_local_layout(path: Path, token_size: TokenSize) -> TokenLayout:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(NPY_PROBE_BYTES)
        end = npy_header_end(head, path.name) if path.suffix.lower() == ".npy" else None
        if end is not None and end > len(head):
            head += f.read(end - len(head))
    return layout_from_head(path.name, head, size, token_size)


def list_token_files(directory: Path) -> list[Path]:
    """Token files directly inside ``directory``, sorted by file name (code-point order).

    Sorting makes the sample order independent of the filesystem (the reference used ``read_dir``
    order; docs/protocol.md, "Known flaws of the reference", flaw 18). Subdirectories are not
    searched.
    """
    if not directory.is_dir():
        raise DataError(f"{directory}: not a directory")
    files = [p for p in directory.iterdir() if p.is_file() and has_data_extension(p.name)]
    return sorted(files, key=lambda p: p.name)
