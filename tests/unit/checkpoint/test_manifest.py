"""The P2P manifest: deterministic, strict, and checked tensor by tensor on assembly."""

from __future__ import annotations

import hashlib
import json

import msgspec
import pytest
import torch

from psyche.checkpoint.manifest import (
    ManifestError,
    build_snapshot,
    decode_manifest,
    tensors_from_stream,
)
from psyche.training.hashing import tensors_hash

CONFIG = json.dumps({"model_type": "llama", "hidden_size": 8})


def _tensors(seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        ("b.weight", torch.randn(50, 7, generator=g)),
        ("a.bias", torch.randn(300, generator=g).to(torch.bfloat16)),
        ("c.scalar", torch.tensor(3.5, dtype=torch.float16)),
        ("d.empty", torch.zeros(0, 4)),
    ]


def _stream(snap) -> bytearray:  # type: ignore[no-untyped-def]
    return bytearray(b"".join(snap.pieces))


def test_snapshot_round_trips_bit_for_bit_and_is_deterministic() -> None:
    snap = build_snapshot(_tensors(), config_json=CONFIG, files={}, step=7, piece_size=1024)
    again = build_snapshot(
        list(reversed(_tensors())), config_json=CONFIG, files={}, step=7, piece_size=1024
    )
    assert snap.manifest_bytes == again.manifest_bytes
    assert snap.manifest_hash == hashlib.sha256(snap.manifest_bytes).digest()
    m = decode_manifest(snap.manifest_bytes, step=7)
    assert [t.name for t in m.tensors] == sorted(n for n, _ in _tensors())
    assert len(snap.pieces) == len(m.pieces) > 1
    out = tensors_from_stream(m, _stream(snap))
    assert tensors_hash(out.items()) == tensors_hash(_tensors()) == m.model_hash
    for name, t in _tensors():
        assert out[name].dtype == t.dtype and out[name].shape == t.shape


def test_only_listed_files_travel() -> None:
    files = {"tokenizer.json": b"{}", "evil.py": b"import os", "config.json": b"{}"}
    snap = build_snapshot(_tensors(), config_json=CONFIG, files=files, step=1)
    assert list(snap.files) == ["tokenizer.json"]
    assert [f.name for f in snap.manifest.files] == ["tokenizer.json"]


def _mutate(**changes: object) -> bytes:
    snap = build_snapshot(_tensors(), config_json=CONFIG, files={}, step=1, piece_size=1024)
    raw = msgspec.json.decode(snap.manifest_bytes)
    for key, value in changes.items():
        if key.startswith("tensor0_"):
            raw["tensors"][0][key.removeprefix("tensor0_")] = value
        else:
            raw[key] = value
    return msgspec.json.encode(raw)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"format": "other"}, "format"),
        ({"step": 2}, "step 2"),
        ({"model_hash": "xyz"}, "model_hash"),
        ({"config_json": "[1]"}, "model_type"),
        ({"config_json": "{"}, "not JSON"),
        ({"tensor0_dtype": "int8"}, "unsupported dtype"),
        ({"tensor0_shape": [301]}, "does not fit"),
        ({"tensor0_offset": 4}, "starts at"),
        ({"total_bytes": 10**6}, "cover"),
        ({"piece_size": 10}, "piece size"),
        ({"pieces": []}, "pieces"),
        ({"files": [{"name": "x.py", "size": 1, "sha256": [0] * 32}]}, "malformed"),
        ({"extra": 1}, "malformed"),
    ],
)
def test_bad_manifests_are_rejected_with_a_reason(changes: dict, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        decode_manifest(_mutate(**changes), step=1)


def test_oversize_manifest_is_rejected_before_parsing() -> None:
    with pytest.raises(ManifestError, match="exceeds"):
        decode_manifest(b" " * (16 << 20 + 1))


def test_a_corrupted_tensor_is_named() -> None:
    snap = build_snapshot(_tensors(), config_json=CONFIG, files={}, step=1)
    stream = _stream(snap)
    stream[-1] ^= 0xFF  # in the last tensor (d.empty has no bytes; c.scalar is last non-empty)
    with pytest.raises(ManifestError, match="does not match its hash"):
        tensors_from_stream(snap.manifest, stream)
    with pytest.raises(ManifestError, match="stream has"):
        tensors_from_stream(snap.manifest, stream[:-1])


def test_unsupported_dtypes_are_refused_when_serving() -> None:
    with pytest.raises(ManifestError, match="int64"):
        build_snapshot([("x", torch.arange(3))], config_json=CONFIG, files={}, step=1)
