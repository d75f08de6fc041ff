"""A content hash of a model's weights, to prove that clients agree bit for bit.

The reference never compares weights between clients (docs/protocol.md,
"Known flaws of the reference", flaw 14), so a client that drifts goes unnoticed. `model_hash` is
cheap enough to run after every round in tests and demos, and it is independent of device, memory
layout and process: it hashes values, not storage.

Encoding, fed to SHA-256 in ascending order of parameter name (the order DisTrO uses,
docs/distro.md):

    "psyche-model-hash-v1"
    then per parameter: field(name, UTF-8) | field(dtype, e.g. "bfloat16") |
                        field(shape, decimal dims joined by ",", "" for a scalar) |
                        field(values: the CPU contiguous tensor's raw little-endian bytes)

where `field(b) = len(b) as u64 little-endian ‖ b`, so no two inputs share an encoding. bf16 has no
numpy dtype, so its values are taken through an int16 view (same bits).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

import numpy as np
import torch

__all__ = ["HASH_DOMAIN", "model_hash", "tensors_hash"]

HASH_DOMAIN = b"psyche-model-hash-v1"

# Same-width integer views for dtypes numpy cannot represent.
_INT_VIEWS: dict[torch.dtype, torch.dtype] = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
}


def _field(hasher: hashlib._Hash, data: bytes | memoryview) -> None:
    hasher.update(struct.pack("<Q", len(data)))
    hasher.update(data)


def _le_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.dtype in _INT_VIEWS:
        flat = flat.view(_INT_VIEWS[flat.dtype])
    array = flat.numpy()
    array = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return np.ascontiguousarray(array).data.cast("B")


def tensors_hash(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 hex digest of `(name, tensor)` pairs, in ascending name order (see module doc)."""
    items = sorted(named_tensors, key=lambda item: item[0])
    names = [name for name, _ in items]
    if len(set(names)) != len(names):
        raise ValueError("tensor names must be unique to be hashed")
    hasher = hashlib.sha256(HASH_DOMAIN)
    for name, tensor in items:
        _field(hasher, name.encode("utf-8"))
        _field(hasher, str(tensor.dtype).removeprefix("torch.").encode("ascii"))
        _field(hasher, ",".join(str(d) for d in tensor.shape).encode("ascii"))
        _field(hasher, _le_bytes(tensor))
    return hasher.hexdigest()


def model_hash(model: torch.nn.Module) -> str:
    """SHA-256 hex digest over all of `model`'s parameters (tied weights count once)."""
    return tensors_hash(model.named_parameters())
