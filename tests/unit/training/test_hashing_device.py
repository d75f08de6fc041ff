"""`model_hash` encodes names, dtypes, shapes and values unambiguously; device selection."""

from __future__ import annotations

import hashlib
import struct

import pytest
import torch

from psyche.training import default_dtype, model_hash, pick_device, tensors_hash
from psyche.training.hashing import HASH_DOMAIN


def test_hash_follows_the_documented_encoding() -> None:
    t = torch.tensor([[1.0, -2.0]], dtype=torch.bfloat16)
    expected = hashlib.sha256(HASH_DOMAIN)
    for field in (b"w", b"bfloat16", b"1,2", t.view(torch.int16).numpy().astype("<i2").tobytes()):
        expected.update(struct.pack("<Q", len(field)) + field)
    assert tensors_hash([("w", t)]) == expected.hexdigest()


def test_hash_is_order_and_layout_independent() -> None:
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.ones(4, dtype=torch.bfloat16)
    assert tensors_hash([("a", a), ("b", b)]) == tensors_hash(
        [("b", b), ("a", a.t().contiguous().t())]
    )


@pytest.mark.parametrize(
    "other",
    [
        [("a", torch.zeros(2, 3))],  # value
        [("a", torch.ones(3, 2))],  # shape
        [("a", torch.ones(2, 3, dtype=torch.float64))],  # dtype
        [("c", torch.ones(2, 3))],  # name
        [("a", torch.ones(2, 3)), ("b", torch.ones(0))],  # an extra empty tensor
    ],
)
def test_any_difference_changes_the_hash(other: list[tuple[str, torch.Tensor]]) -> None:
    assert tensors_hash([("a", torch.ones(2, 3))]) != tensors_hash(other)


def test_model_hash_sees_a_single_bit_flip() -> None:
    model = torch.nn.Linear(4, 3)
    before = model_hash(model)
    with torch.no_grad():
        model.weight.view(torch.int32)[0, 0] ^= 1
    assert model_hash(model) != before
    with pytest.raises(ValueError, match="unique"):
        tensors_hash([("a", torch.ones(1)), ("a", torch.ones(1))])


def test_device_choice() -> None:
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert default_dtype(torch.device("cpu")) == torch.float32
    assert default_dtype(torch.device("cuda")) == torch.bfloat16
    with pytest.raises(ValueError, match="unknown device"):
        pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            pick_device("cuda")
    if torch.backends.mps.is_available():
        assert pick_device("mps") == torch.device("mps")
    else:
        with pytest.raises(ValueError, match="'mps' requested but MPS is not available"):
            pick_device("mps")
