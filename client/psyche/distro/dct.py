"""Chunked orthonormal DCT-II: the transform DisTrO sparsifies in (docs/distro.md, "DCT chunking").

Why a DCT: gradients and momenta of neighbouring weights are correlated, so in the frequency domain
most of the energy sits in a few coefficients per tile and top-k keeps most of the signal. Tiles are
small (the "chunk", at most `compression_chunk` per edge) so the transform is a pair of small dense
matmuls per tile instead of a full-size FFT, and so the sparsity budget is spread over the whole
tensor instead of concentrating in one region.

Trade-offs kept from the reference:
- The tile edge for a dimension is its largest divisor not above the target, so nothing is padded.
  A dimension with an awkward factorisation gets a small tile (50257 → 29, a prime → 1), which
  compresses worse but keeps encode/decode exact inverses and the shapes trivially checkable.
- Tensors with two or more dimensions are tiled over their last two axes with a separable 2-D DCT;
  leading axes (e.g. conv kernels) are kept as batch axes.

The basis itself (each entry the exact value rounded once) and the integer grids on which
`decode_sign`, the apply's inverse transform, gives the same bits on every client are in
`psyche.distro.dct_exact`; `decode_sign`'s fast path, a float evaluation with a proven bound, is
in `psyche.distro.sign_bound`. `encode` and `decode` stay plain matmuls: they only shape each
client's own payload and residual, which no other client recomputes. docs/distro.md has the rule
and its costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

# decode_sign_exact stays importable from here, beside decode_sign: they are one family.
from psyche.distro.dct_exact import (
    check_encoded,
    decode_sign_exact,
    float_basis,
    normalise_device,
)
from psyche.distro.sign_bound import fast_decode_sign_many

__all__ = [
    "chunk_size",
    "dct_basis",
    "decode",
    "decode_sign",
    "decode_sign_exact",
    "decode_sign_many",
    "encode",
    "encoded_shape",
]


def chunk_size(dim: int, target: int) -> int:
    """The largest divisor of `dim` that is ≤ `target` (`dim` itself when `dim ≤ target`).

    Examples: 4096 → 64 and 50257 (= 29·1733) → 29 for target 64; 12 → 12 for any target ≥ 12.
    """
    if dim < 1:
        raise ValueError(f"dimension must be ≥ 1, got {dim}")
    if target < 1:
        raise ValueError(f"target chunk must be ≥ 1, got {target}")
    if dim <= target:
        return dim
    best = 1
    # Divisors come in pairs (d, dim // d); walking d up to √dim sees every divisor once.
    for d in range(1, math.isqrt(dim) + 1):
        if dim % d == 0:
            if d <= target:
                best = max(best, d)
            if dim // d <= target:
                best = max(best, dim // d)
    return best


def dct_basis(
    size: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """Orthonormal DCT-II matrix `F` with `x @ F == scipy.fft.dct(x, type=2, norm="ortho")`.

    Its inverse is `F.T`. The returned tensor is cached and shared: do not modify it in place.
    """
    if size < 1:
        raise ValueError(f"basis size must be ≥ 1, got {size}")
    return float_basis(size, dtype, normalise_device(device))


def encoded_shape(shape: tuple[int, ...] | torch.Size, target: int) -> tuple[int, ...]:
    """The shape `encode` gives a tensor of `shape` (a scalar counts as 1-D of length 1)."""
    shape = tuple(shape)
    if len(shape) == 0:
        shape = (1,)
    if len(shape) == 1:
        c = chunk_size(shape[0], target)
        return (shape[0] // c, c)
    *lead, m, n = shape
    h, w = chunk_size(m, target), chunk_size(n, target)
    return (*lead, m // h, n // w, h, w)


def encode(x: torch.Tensor, target_chunk: int) -> torch.Tensor:
    """DCT-encode `x` per tile, in `x`'s dtype.

    1-D `[n]` → `[n/c, c]`; ≥2-D `[…, m, n]` → `[…, m/h, n/w, h, w]`. A scalar is treated as `[1]`.
    """
    if not x.is_floating_point():
        raise TypeError(f"encode needs a floating-point tensor, got {x.dtype}")
    if x.ndim <= 1:
        flat = x.reshape(-1)
        c = chunk_size(flat.shape[0], target_chunk)
        return flat.reshape(-1, c) @ dct_basis(c, x.dtype, x.device)
    *lead, m, n = x.shape
    h, w = chunk_size(m, target_chunk), chunk_size(n, target_chunk)
    tiles = x.reshape(*lead, m // h, h, n // w, w).transpose(-3, -2)
    f_h, f_w = dct_basis(h, x.dtype, x.device), dct_basis(w, x.dtype, x.device)
    # Separable 2-D DCT per h×w tile: F_hᵀ · tile · F_w.
    return f_h.T @ tiles @ f_w


def decode(encoded: torch.Tensor) -> torch.Tensor:
    """Inverse of `encode`; the original shape follows from the encoded one.

    `[n/c, c]` → `[n]`; `[…, m/h, n/w, h, w]` → `[…, m, n]`. A scalar comes back as `[1]`.
    """
    if not encoded.is_floating_point():
        raise TypeError(f"decode needs a floating-point tensor, got {encoded.dtype}")
    if encoded.ndim == 2:
        c = encoded.shape[-1]
        return (encoded @ dct_basis(c, encoded.dtype, encoded.device).T).reshape(-1)
    if encoded.ndim < 4:
        raise ValueError(
            f"encoded tensor must be 2-D (from a 1-D tensor) or ≥4-D (tiles), "
            f"got shape {tuple(encoded.shape)}"
        )
    *lead, ny, nx, h, w = encoded.shape
    f_h = dct_basis(h, encoded.dtype, encoded.device)
    f_w = dct_basis(w, encoded.dtype, encoded.device)
    tiles = f_h @ encoded @ f_w.T
    return tiles.transpose(-3, -2).reshape(*lead, ny * h, nx * w)


def decode_sign(encoded: torch.Tensor) -> torch.Tensor:
    """`decode_sign_exact(encoded)`, bit for bit, at about the cost of a float matmul decode.

    The sum is evaluated in float32 (float64 where float32 matmuls may run in reduced precision)
    with a proven per-tile error bound against the exact grid evaluation (psyche.distro.sign_bound,
    docs/distro.md "Fast path"); only elements whose float value is within that bound are
    evaluated exactly. Same shape, dtype, device and zero rule as `decode_sign_exact`.
    """
    return decode_sign_many([encoded])[0]


def decode_sign_many(
    encoded: Sequence[torch.Tensor], overwrite: bool = False
) -> list[torch.Tensor]:
    """`[decode_sign(x) for x in encoded]`, with the few undecided elements of all tensors
    recomputed exactly together (what `Distro.apply` runs on a model's tensors): the fast path's
    fixed costs are paid once per call instead of once per tensor. With `overwrite`, float32
    inputs may be overwritten by (and returned as views of) their signs."""
    for x in encoded:
        check_encoded(x, "decode_sign")
    return fast_decode_sign_many(encoded, overwrite=overwrite)
