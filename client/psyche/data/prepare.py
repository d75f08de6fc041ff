"""Turn local UTF-8 text into token files plus a ``data.toml``, so nothing has to be downloaded.

``prepare_corpus`` reads text files (a directory is searched recursively for ``*.txt`` and
``*.md``, in sorted path order), treats **each file as one document**, tokenizes it, appends the
tokenizer's EOS token after every document, and writes the token stream as ``.npy`` shards of at
most ``shard_tokens`` tokens (``tokens-00000.npy``, … with a NumPy header; ``'<u2'`` or
``'<u4'``). ``shard_tokens`` is rounded down to a multiple of ``seq_len``: providers cut each
file separately, so this way no token is lost at a shard boundary. Next to the shards it writes a
``data.toml`` (``dir = "."``) that the TCP data server loads and whose directory a
``LocalDataProvider`` reads. Each file is tokenized whole, so a single huge file needs memory in
proportion to its size.

:class:`ByteTokenizer` needs no vocabulary file: byte ``b`` is id ``b`` and the specials are BOS
256, EOS 257 and PAD 258 (259 ids in all, as in ``psyche.training.tokenizer``), so any UTF-8 text
round-trips exactly. Hugging Face tokenizers plug in through the :class:`TextTokenizer` protocol
(the CLI adapts a local ``AutoTokenizer``; this package does not import transformers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from psyche.data.provider import DataError
from psyche.data.tokenfiles import has_data_extension
from psyche.protocol.locations import TokenSize

__all__ = [
    "ByteTokenizer",
    "PrepareResult",
    "TextTokenizer",
    "find_text_files",
    "prepare_corpus",
    "write_data_toml",
]

TEXT_SUFFIXES = (".txt", ".md")
DATA_TOML = "data.toml"


class TextTokenizer(Protocol):
    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_token_id(self) -> int | None: ...

    def encode(self, text: str) -> Sequence[int] | np.ndarray: ...


class ByteTokenizer:
    """UTF-8 bytes shifted past three special ids (see module docstring)."""

    # Same ids as psyche.training.tokenizer (which this layer may not import), so token files
    # made here decode with the tokenizer saved next to `psyche model init` models.
    BOS, EOS, PAD = 256, 257, 258
    vocab_size = 259
    eos_token_id = EOS

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of the non-special ids (specials are dropped)."""
        arr = np.asarray(ids, dtype=np.int64)
        return arr[arr < 256].astype(np.uint8).tobytes().decode("utf-8")

    def decode_documents(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """One string per EOS-terminated document (a trailing unterminated part is included)."""
        arr = np.asarray(ids, dtype=np.int64)
        cuts = np.flatnonzero(arr == self.EOS)
        docs, start = [], 0
        for cut in cuts:
            docs.append(self.decode(arr[start:cut]))
            start = int(cut) + 1
        if start < len(arr):
            docs.append(self.decode(arr[start:]))
        return docs


@dataclass(frozen=True, slots=True)
class PrepareResult:
    shards: list[Path]
    n_tokens: int
    n_documents: int
    data_toml: Path


def find_text_files(inputs: Sequence[str | Path]) -> list[Path]:
    """Files named directly, plus ``*.txt``/``*.md`` under named directories, sorted per input."""
    out: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = [f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES]
            out.extend(sorted(found))
        elif p.is_file():
            out.append(p)
        else:
            raise DataError(f"{p}: no such file or directory")
    if not out:
        raise DataError("no text files found (directories are searched for *.txt and *.md)")
    return out


def write_data_toml(
    path: Path, token_size: TokenSize, seq_len: int, shuffle_seed: bytes, comment: str = ""
) -> None:
    """A ``data.toml`` readable by ``psyche.protocol.run_file.load_data_config``."""
    if len(shuffle_seed) != 32:
        raise ValueError("shuffle_seed must be 32 bytes")
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [
        'dir = "."',
        f'token_size = "{token_size.name}"',
        f"seq_len = {seq_len}",
        f"shuffle_seed = [{', '.join(str(b) for b in shuffle_seed)}]",
    ]
    path.write_text("\n".join(lines) + "\n")


class _ShardWriter:
    def __init__(self, out_dir: Path, dtype: np.dtype[np.integer], shard_tokens: int) -> None:
        self.out_dir, self.dtype = out_dir, dtype
        self.buf = np.empty(shard_tokens, dtype=dtype)
        self.fill = 0
        self.shards: list[Path] = []

    def add(self, tokens: np.ndarray) -> None:
        while len(tokens):
            take = min(len(tokens), len(self.buf) - self.fill)
            self.buf[self.fill : self.fill + take] = tokens[:take]
            self.fill += take
            tokens = tokens[take:]
            if self.fill == len(self.buf):
                self.flush()

    def flush(self) -> None:
        if self.fill:
            path = self.out_dir / f"tokens-{len(self.shards):05d}.npy"
            np.save(path, self.buf[: self.fill], allow_pickle=False)
            self.shards.append(path)
            self.fill = 0


def prepare_corpus(
    inputs: Sequence[str | Path],
    tokenizer: TextTokenizer,
    out_dir: str | Path,
    *,
    seq_len: int = 2048,
    token_size: TokenSize | None = None,
    shard_tokens: int = 1 << 24,
    shuffle_seed: bytes = bytes(32),
    overwrite: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    tokenizer_name: str = "",
) -> PrepareResult:
    """Tokenize ``inputs`` into ``out_dir``; ``on_progress(bytes_done, bytes_total)`` per file.

    ``token_size`` defaults to ``TwoBytes`` when the vocabulary fits in u16. Existing token files
    in ``out_dir`` are an error unless ``overwrite`` (then they are deleted first), so a smaller
    corpus never leaves stale shards behind.
    """
    if seq_len <= 0 or shard_tokens <= 0:
        raise ValueError("seq_len and shard_tokens must be positive")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise DataError("the tokenizer has no EOS token to separate documents")
    token_size = _token_size_for(tokenizer.vocab_size, token_size)
    limit = 1 << (8 * token_size.value)
    files = find_text_files(inputs)
    out = _clear_output_dir(Path(out_dir), overwrite)
    shard_tokens = max(seq_len, shard_tokens // seq_len * seq_len)
    dtype: np.dtype[np.integer] = np.dtype("<u2" if token_size is TokenSize.TwoBytes else "<u4")
    writer = _ShardWriter(out, dtype, shard_tokens)
    total_bytes = sum(f.stat().st_size for f in files)
    done_bytes = n_tokens = 0
    for f in files:
        doc = _document_tokens(f, tokenizer, eos, limit)
        writer.add(doc)
        n_tokens += len(doc)
        done_bytes += f.stat().st_size
        if on_progress is not None:
            on_progress(done_bytes, total_bytes)
    writer.flush()
    if n_tokens < seq_len:
        raise DataError(f"the corpus has {n_tokens} tokens, fewer than one sample of {seq_len}")
    toml = out / DATA_TOML
    note = (
        f"written by `psyche data prepare`; tokenizer: {tokenizer_name or type(tokenizer).__name__}"
    )
    write_data_toml(toml, token_size, seq_len, shuffle_seed, note)
    return PrepareResult(writer.shards, n_tokens, len(files), toml)


def _token_size_for(vocab: int, token_size: TokenSize | None) -> TokenSize:
    """``token_size``, by default the narrowest width that holds every id of the vocabulary;
    refused if the vocabulary does not fit it."""
    if token_size is None:
        token_size = TokenSize.TwoBytes if vocab <= 1 << 16 else TokenSize.FourBytes
    if vocab > 1 << (8 * token_size.value):
        raise DataError(f"vocabulary of {vocab} ids does not fit {token_size.name}; use FourBytes")
    return token_size


def _clear_output_dir(out: Path, overwrite: bool) -> Path:
    """``out``, created if needed and without token files: existing ones are refused unless
    ``overwrite`` (then deleted)."""
    out.mkdir(parents=True, exist_ok=True)
    stale = [p for p in out.iterdir() if p.is_file() and has_data_extension(p.name)]
    if stale and not overwrite:
        raise DataError(f"{out} already holds token files ({stale[0].name}, …); pass overwrite")
    for p in stale:
        p.unlink()
    return out


def _document_tokens(f: Path, tokenizer: TextTokenizer, eos: int, limit: int) -> np.ndarray:
    """One file as one document: its tokens (each below ``limit``), then EOS."""
    try:
        text = f.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= limit):
        raise DataError(f"{f}: tokenizer produced ids outside 0..{limit - 1}")
    return np.append(ids, eos)
