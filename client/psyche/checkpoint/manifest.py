"""The P2P model manifest: what a joining client needs to rebuild the model bit for bit.

A client that finished a cooldown serves the model as content-addressed blobs (done differently from
the reference: docs/protocol.md, "P2P model sharing"): one **manifest** blob, then the parameters as
fixed-size **pieces** of one byte stream, plus the tokenizer files. The manifest is JSON::

    {format, step, model_hash, config_json,
     files:   [{name, size, sha256}]                       tokenizer and generation files
     tensors: [{name, dtype, shape, offset, nbytes, sha256}] ascending name order
     piece_size, total_bytes,
     pieces:  [{size, sha256}]}                            the stream cut every piece_size bytes

The stream is every parameter's raw little-endian bytes (the same bytes :func:`model_hash`
hashes) laid end to end in name order, so the manifest is a pure function of the weights, the
config text and the files: honest peers, who hold bit-identical weights, serve byte-identical
manifests with the same SHA-256. That hash is what a joiner agrees on (:mod:`.p2p`); every other
blob is then checked against the manifest, and each tensor's bytes, shape and dtype again after
assembly. Fixed-size pieces (rather than one blob per tensor) spread a model evenly over several
peers whatever its tensor sizes, and keep the number of requests small.

Decoding is strict: unknown fields, unknown dtypes, overlapping or gapped offsets, sizes that do
not add up, or anything beyond the limits below is a :class:`ManifestError` naming the problem.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated

import msgspec
import torch

from psyche.training.hashing import _le_bytes, tensors_hash

__all__ = [
    "DTYPES",
    "FORMAT",
    "MAX_MANIFEST_BYTES",
    "PIECE_SIZE",
    "SHARED_FILES",
    "FileEntry",
    "Manifest",
    "ManifestError",
    "PieceEntry",
    "Snapshot",
    "TensorEntry",
    "build_snapshot",
    "decode_manifest",
    "tensors_from_stream",
]

FORMAT = "psyche-p2p-model-v1"
PIECE_SIZE = 8 << 20
"""Default piece size: large enough that per-request overhead is small, small enough that a
100 M-parameter model (400 MB in fp32) is ~50 pieces to spread over peers."""
MAX_MANIFEST_BYTES = 16 << 20
MAX_FILE_BYTES = 64 << 20
MAX_MODEL_BYTES = 1 << 40
MAX_PIECE_SIZE = 256 << 20
MIN_PIECE_SIZE = 1 << 10
SHARED_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "optimizer_state.safetensors",
)
"""Files besides ``config.json`` that travel with the model (as the reference keeps them), and
the optimizer's run-global state where the run's optimizer has one (SparseLoCo's outer
momentum; ``psyche.training.sparseloco_trainer.OPTIMIZER_STATE_FILE``)."""

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}

Bytes32 = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
NonNeg = Annotated[int, msgspec.Meta(ge=0)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class ManifestError(ValueError):
    """A manifest (or the bytes it describes) is malformed or inconsistent."""


class _Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class FileEntry(_Strict, frozen=True):
    name: Name
    size: NonNeg
    sha256: Bytes32


class TensorEntry(_Strict, frozen=True):
    name: Name
    dtype: str
    shape: Annotated[list[NonNeg], msgspec.Meta(max_length=8)]
    offset: NonNeg
    nbytes: NonNeg
    sha256: Bytes32


class PieceEntry(_Strict, frozen=True):
    size: NonNeg
    sha256: Bytes32


class Manifest(_Strict, frozen=True):
    format: str
    step: NonNeg
    model_hash: str
    config_json: str
    files: list[FileEntry]
    tensors: list[TensorEntry]
    piece_size: NonNeg
    total_bytes: NonNeg
    pieces: list[PieceEntry]

    def encode(self) -> bytes:
        return msgspec.json.encode(self)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A model ready to serve: the manifest and every blob it names (pieces, then files)."""

    manifest: Manifest
    manifest_bytes: bytes
    manifest_hash: bytes
    pieces: list[bytes]
    files: dict[str, bytes]


def _sha(data: bytes | memoryview) -> bytes:
    return hashlib.sha256(data).digest()


def build_snapshot(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    *,
    config_json: str,
    files: Mapping[str, bytes],
    step: int,
    piece_size: int = PIECE_SIZE,
) -> Snapshot:
    """Serialize ``named_tensors`` (a model's parameters) into a manifest and its pieces."""
    items = sorted(named_tensors, key=lambda item: item[0])
    entries: list[TensorEntry] = []
    stream = bytearray()
    for name, tensor in items:
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in DTYPES:
            raise ManifestError(f"tensor {name} has dtype {dtype}, which P2P sharing cannot carry")
        raw = _le_bytes(tensor)
        entries.append(
            TensorEntry(name, dtype, list(tensor.shape), len(stream), len(raw), _sha(raw))
        )
        stream += raw
    view = memoryview(stream)
    pieces = [bytes(view[i : i + piece_size]) for i in range(0, len(stream), piece_size)]
    shared = {k: bytes(v) for k, v in sorted(files.items()) if k in SHARED_FILES}
    manifest = Manifest(
        format=FORMAT,
        step=step,
        model_hash=tensors_hash(items),
        config_json=config_json,
        files=[FileEntry(k, len(v), _sha(v)) for k, v in shared.items()],
        tensors=entries,
        piece_size=piece_size,
        total_bytes=len(stream),
        pieces=[PieceEntry(len(p), _sha(p)) for p in pieces],
    )
    data = manifest.encode()
    return Snapshot(manifest, data, _sha(data), pieces, shared)


_decoder = msgspec.json.Decoder(Manifest)


def decode_manifest(data: bytes, *, step: int | None = None) -> Manifest:
    """Parse and check a manifest received from peers (see the module docstring)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest of {len(data)} bytes exceeds {MAX_MANIFEST_BYTES}")
    try:
        m = _decoder.decode(data)
    except msgspec.MsgspecError as e:
        raise ManifestError(f"malformed manifest: {e}") from None
    if m.format != FORMAT:
        raise ManifestError(f"manifest format {m.format!r} is not {FORMAT!r}")
    if step is not None and m.step != step:
        raise ManifestError(f"manifest is for step {m.step}, the run is at step {step}")
    if not re.fullmatch(r"[0-9a-f]{64}", m.model_hash):
        raise ManifestError("manifest model_hash is not 64 lowercase hex digits")
    try:
        config = json.loads(m.config_json)
    except json.JSONDecodeError as e:
        raise ManifestError(f"manifest config is not JSON: {e}") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ManifestError("manifest config must be an object with a string model_type")
    _check_files(m)
    _check_tensors(m)
    _check_pieces(m)
    return m


def _check_files(m: Manifest) -> None:
    names = [f.name for f in m.files]
    if len(set(names)) != len(names):
        raise ManifestError("manifest lists a file twice")
    for f in m.files:
        if f.name not in SHARED_FILES:
            raise ManifestError(f"manifest file {f.name!r} is not one of {SHARED_FILES}")
        if f.size > MAX_FILE_BYTES:
            raise ManifestError(f"manifest file {f.name} of {f.size} bytes is too large")


def _check_tensors(m: Manifest) -> None:
    if not m.tensors:
        raise ManifestError("manifest lists no tensors")
    if m.total_bytes > MAX_MODEL_BYTES:
        raise ManifestError(f"model of {m.total_bytes} bytes exceeds {MAX_MODEL_BYTES}")
    expect_offset, last_name = 0, ""
    for t in m.tensors:
        if t.name <= last_name:
            raise ManifestError(f"tensor {t.name} is out of order or repeated")
        last_name = t.name
        if t.dtype not in DTYPES:
            raise ManifestError(f"tensor {t.name} has unsupported dtype {t.dtype!r}")
        itemsize = torch.empty((), dtype=DTYPES[t.dtype]).element_size()
        if math.prod(t.shape) * itemsize != t.nbytes:
            raise ManifestError(f"tensor {t.name}: shape {t.shape} does not fit {t.nbytes} bytes")
        if t.offset != expect_offset:
            raise ManifestError(f"tensor {t.name} starts at {t.offset}, expected {expect_offset}")
        expect_offset += t.nbytes
    if expect_offset != m.total_bytes:
        raise ManifestError(f"tensors cover {expect_offset} bytes, total is {m.total_bytes}")


def _check_pieces(m: Manifest) -> None:
    if not MIN_PIECE_SIZE <= m.piece_size <= MAX_PIECE_SIZE:
        raise ManifestError(f"piece size {m.piece_size} is outside its limits")
    n = -(-m.total_bytes // m.piece_size)
    if len(m.pieces) != n:
        raise ManifestError(f"manifest has {len(m.pieces)} pieces, {n} expected")
    for i, p in enumerate(m.pieces):
        want = min(m.piece_size, m.total_bytes - i * m.piece_size)
        if p.size != want:
            raise ManifestError(f"piece {i} has size {p.size}, {want} expected")


def tensors_from_stream(m: Manifest, stream: bytearray) -> dict[str, torch.Tensor]:
    """Cut the assembled byte stream into tensors, checking each one's hash, shape and dtype."""
    if len(stream) != m.total_bytes:
        raise ManifestError(f"stream has {len(stream)} bytes, the manifest says {m.total_bytes}")
    view = memoryview(stream)
    out: dict[str, torch.Tensor] = {}
    for t in m.tensors:
        raw = view[t.offset : t.offset + t.nbytes]
        if _sha(raw) != t.sha256:
            raise ManifestError(f"tensor {t.name} does not match its hash")
        dtype = DTYPES[t.dtype]
        if t.nbytes == 0:
            tensor = torch.empty(t.shape, dtype=dtype)
        else:
            tensor = torch.frombuffer(
                stream, dtype=dtype, count=math.prod(t.shape), offset=t.offset
            )
        out[t.name] = tensor.reshape(t.shape).clone()
        if list(out[t.name].shape) != t.shape or out[t.name].dtype != dtype:
            raise ManifestError(f"tensor {t.name} did not rebuild as {t.dtype}{t.shape}")
    return out
