"""DCT chunking checked against scipy's orthonormal DCT-II, plus chunk sizes and round trips."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft
import torch

from psyche.distro import chunk_size, dct_basis, decode, encode, encoded_shape


@pytest.mark.parametrize(
    ("dim", "target", "expected"),
    [
        (4096, 64, 64),
        (50257, 64, 29),
        (12, 64, 12),
        (96, 64, 48),
        (87, 64, 29),
        (64, 64, 64),
        (65, 64, 13),
        (97, 64, 1),  # prime above the target: tiles of one element
        (1, 64, 1),
        (100, 1, 1),
        (128, 100, 64),
    ],
)
def test_chunk_size_is_largest_divisor_not_above_target(
    dim: int, target: int, expected: int
) -> None:
    assert chunk_size(dim, target) == expected
    brute = max(d for d in range(1, dim + 1) if dim % d == 0 and d <= max(target, 1))
    assert chunk_size(dim, target) == (dim if dim <= target else brute)


@pytest.mark.parametrize(("dim", "target"), [(0, 4), (4, 0), (-3, 2)])
def test_chunk_size_rejects_nonpositive(dim: int, target: int) -> None:
    with pytest.raises(ValueError):
        chunk_size(dim, target)


@pytest.mark.parametrize("size", [1, 2, 12, 29, 64, 96])
def test_basis_matches_scipy_dct_ortho(size: int) -> None:
    expected = scipy.fft.dct(np.eye(size), type=2, norm="ortho", axis=-1)
    basis = dct_basis(size, torch.float64).numpy()
    np.testing.assert_allclose(basis, expected, atol=1e-13)
    np.testing.assert_allclose(basis @ basis.T, np.eye(size), atol=1e-13)


def test_basis_is_cached_per_size_dtype_device() -> None:
    assert dct_basis(12, torch.float32) is dct_basis(12, torch.float32, "cpu")
    assert dct_basis(12, torch.float32) is not dct_basis(12, torch.float64)


@pytest.mark.parametrize(("n", "target"), [(12, 64), (64, 8), (96, 64), (87, 64)])
def test_encode_1d_matches_scipy_per_chunk(n: int, target: int) -> None:
    x = np.random.default_rng(n).standard_normal(n)
    c = chunk_size(n, target)
    got = encode(torch.from_numpy(x), target)
    assert tuple(got.shape) == (n // c, c) == encoded_shape((n,), target)
    expected = scipy.fft.dct(x.reshape(-1, c), type=2, norm="ortho", axis=-1)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-12)


@pytest.mark.parametrize(
    ("shape", "target"), [((12, 64), 64), ((96, 87), 64), ((64, 96), 16), ((3, 12, 8), 4)]
)
def test_encode_2d_tiles_match_scipy_dctn(shape: tuple[int, ...], target: int) -> None:
    x = np.random.default_rng(sum(shape)).standard_normal(shape)
    *lead, m, n = shape
    h, w = chunk_size(m, target), chunk_size(n, target)
    got = encode(torch.from_numpy(x), target)
    assert tuple(got.shape) == (*lead, m // h, n // w, h, w) == encoded_shape(shape, target)
    tiles = np.swapaxes(x.reshape(*lead, m // h, h, n // w, w), -3, -2)
    expected = scipy.fft.dctn(tiles, type=2, norm="ortho", axes=(-2, -1))
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("shape", [(12,), (87,), (96, 87), (4, 64, 12), ()])
def test_round_trip(shape: tuple[int, ...]) -> None:
    generator = torch.Generator().manual_seed(7)
    x64 = torch.randn(shape, generator=generator, dtype=torch.float64)
    back = decode(encode(x64, 16)).reshape(shape)
    assert back.dtype == torch.float64
    assert float((back - x64).abs().max()) < 1e-12
    x32 = x64.float()
    back32 = decode(encode(x32, 16)).reshape(shape)
    # allclose, not torch.testing.assert_close: the latter costs seconds of imports on first use.
    assert torch.allclose(back32, x32, rtol=1e-5, atol=1e-5)


def test_decode_rejects_bad_shapes_and_dtypes() -> None:
    with pytest.raises(ValueError):
        decode(torch.zeros(2, 3, 4))
    with pytest.raises(TypeError):
        encode(torch.zeros(4, dtype=torch.int64), 4)
