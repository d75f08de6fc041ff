"""Top-k sparsification against numpy, scatter-mean aggregation, and 1-bit sign packing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from psyche.distro import (
    DistroResult,
    aggregate,
    compress,
    decompress,
    encode,
    index_width,
    pack_signs,
    sign_values,
    unpack_signs,
)


@pytest.mark.parametrize(("shape", "topk"), [((96,), 5), ((48, 36), 7), ((2, 8, 12), 3)])
def test_topk_matches_numpy_argsort(shape: tuple[int, ...], topk: int) -> None:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    encoded = encode(x, 12)
    result = compress(encoded, topk)
    flat = encoded.reshape(*encoded.shape[:-2], -1) if encoded.ndim > 2 else encoded
    order = np.argsort(-np.abs(flat.numpy()), axis=-1, kind="stable")[..., :topk]
    np.testing.assert_array_equal(result.idx.numpy(), order)
    np.testing.assert_array_equal(result.val.numpy(), np.take_along_axis(flat.numpy(), order, -1))
    assert result.xshape == tuple(encoded.shape)
    assert result.totalk == flat.shape[-1]
    assert result.k == topk


@pytest.mark.parametrize(("topk", "k"), [(0, 1), (-5, 1), (1000, 12)])
def test_k_is_clamped_to_tile(topk: int, k: int) -> None:
    assert compress(encode(torch.randn(24), 12), topk).k == k


@pytest.mark.parametrize("shape", [(96,), (24, 36), (3, 8, 8)])
def test_full_k_round_trip_is_exact(shape: tuple[int, ...]) -> None:
    encoded = encode(torch.randn(shape, dtype=torch.float64), 12)
    full = compress(encoded, 10**6)
    back = decompress(full.idx, full.val, full.xshape, full.totalk)
    assert torch.equal(back, encoded)


@pytest.mark.parametrize(
    ("totalk", "width"), [(1, 1), (256, 1), (257, 2), (4096, 2), (65_536, 2), (65_537, 4)]
)
def test_index_width(totalk: int, width: int) -> None:
    assert index_width(totalk) == width


@pytest.mark.parametrize("peers", [1, 2, 3])
@pytest.mark.parametrize("distinct", [False, True])
@pytest.mark.parametrize("signs", [False, True])
def test_aggregate_equals_scatter_reduce_mean_bit_exact(
    peers: int, distinct: bool, signs: bool
) -> None:
    """Also with ±1 values (1-bit mode), whose sums cancel to zeros, and one peer (its own
    values, the shortcut `generate` takes)."""
    generator = torch.Generator().manual_seed(3)
    encoded = [encode(torch.randn(16, 24, generator=generator), 8) for _ in range(peers)]
    results = [compress(e, 20) for e in encoded]
    if signs:
        results = [DistroResult(r.idx, sign_values(r.val), r.xshape, r.totalk) for r in results]
    grid_k = results[0].idx.shape
    idx = torch.cat([r.idx for r in results], -1)
    val = torch.cat([r.val for r in results], -1)
    zeros = torch.zeros(*grid_k[:-1], results[0].totalk)
    expected = zeros.scatter_reduce(-1, idx, val, "mean", include_self=False)
    got = aggregate(results, distinct=distinct)
    assert torch.equal(got, expected.reshape(results[0].xshape))
    assert not bool(torch.signbit(got[got == 0]).any()), "no −0.0 where nobody or a tie chose"


def test_aggregate_rejects_disagreeing_shapes() -> None:
    a = compress(encode(torch.randn(16), 8), 2)
    b = compress(encode(torch.randn(16), 4), 2)
    with pytest.raises(ValueError, match="xshape"):
        aggregate([a, b])


def test_decompress_averages_repeated_indices() -> None:
    idx = torch.tensor([[0, 0, 3]])
    val = torch.tensor([[1.0, 3.0, 5.0]])
    assert decompress(idx, val, (1, 4), 4).tolist() == [[2.0, 0.0, 0.0, 5.0]]


def test_pack_signs_is_lsb_first_with_one_meaning_negative() -> None:
    val = torch.tensor([-1.0, 2.0, 3.0, -4.0, 5.0, 6.0, 7.0, 8.0, -0.5, 0.0])
    packed = pack_signs(val)
    assert packed.tolist() == [0b0000_1001, 0b0000_0001]
    assert unpack_signs(packed, 10).tolist() == sign_values(val).tolist()


@pytest.mark.parametrize("count", [1, 7, 8, 9, 64, 1001])
def test_pack_unpack_round_trip(count: int) -> None:
    val = torch.randn(count, generator=torch.Generator().manual_seed(count))
    packed = pack_signs(val)
    assert packed.numel() == (count + 7) // 8
    signs = unpack_signs(packed, count, torch.bfloat16)
    assert torch.equal(signs.float(), torch.where(val < 0, -1.0, 1.0))


def test_signed_zero_follows_signbit() -> None:
    assert sign_values(torch.tensor([-0.0, 0.0])).tolist() == [-1.0, 1.0]


def test_unpack_rejects_wrong_length() -> None:
    with pytest.raises(ValueError):
        unpack_signs(torch.zeros(2, dtype=torch.uint8), 17)


def test_result_k_property() -> None:
    result = DistroResult(torch.zeros(3, 2, dtype=torch.int64), torch.zeros(3, 2), (3, 4), 4)
    assert result.k == 2
