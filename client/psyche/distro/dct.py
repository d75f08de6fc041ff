"""Chunked orthonormal DCT-II: the transform DisTrO sparsifies in (SPEC §5.1).

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

Unlike the reference (bf16 bases built in f32), the bases are built in float64 and cast once to the
compute dtype; `Distro` runs the transforms in fp32 even for bf16 models (SPEC §11 item 23).
Basis matrices are cached per (size, dtype, device) and must be treated as read-only.
"""

from __future__ import annotations

import functools
import math

import torch

__all__ = ["chunk_size", "dct_basis", "decode", "encode", "encoded_shape"]


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


@functools.lru_cache(maxsize=128)
def _basis(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    n = torch.arange(size, dtype=torch.float64).unsqueeze(1)
    k = torch.arange(size, dtype=torch.float64).unsqueeze(0)
    basis = torch.cos(math.pi * (2.0 * n + 1.0) * k / (2.0 * size)) * math.sqrt(2.0 / size)
    basis[:, 0] *= math.sqrt(0.5)
    # Built on the CPU in float64 then moved: some accelerators have no float64 at all.
    return basis.to(device=device, dtype=dtype)


def _normalise(device: torch.device | str | None) -> torch.device:
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and device.index is None:
        # "cuda" and "cuda:0" must share one cache entry.
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def dct_basis(
    size: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """Orthonormal DCT-II matrix `F` with `x @ F == scipy.fft.dct(x, type=2, norm="ortho")`.

    Its inverse is `F.T`. The returned tensor is cached and shared: do not modify it in place.
    """
    if size < 1:
        raise ValueError(f"basis size must be ≥ 1, got {size}")
    return _basis(size, dtype, _normalise(device))


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
