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

Unlike the reference (bf16 bases built in f32), each basis entry is the exact value rounded once to
float64 (computed with `decimal`, so no platform's `cos` is involved) and cast once to the compute
dtype; `Distro` runs the transforms in fp32 even for bf16 models (docs/protocol.md,
"Known flaws of the reference", flaw 23). Basis matrices are cached per (size, dtype, device) and
must be treated as read-only.

`decode_sign` is the inverse transform that every client runs on the consensus result set at apply
time, where honest clients must agree bit for bit whatever their CPU, GPU or thread count. A float
matmul cannot promise that: its summation order (and whether it fuses multiply-adds) depends on the
kernel, so where the exact sum is zero or tiny its sign is decided by rounding. `decode_sign`
therefore evaluates the same sum exactly: the basis and the coefficients are first rounded to
integer grids small enough that every product and every partial sum is an integer below 2^53, and
a float64 matmul of such integers is exact in any order, blocking or FMA use. Only the sign of
the result is kept, so the grids' power-of-two scales never need undoing at the end. `encode` and
`decode` stay plain matmuls: they only shape each client's own payload and residual, which no other
client recomputes. docs/distro.md has the rule and its costs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import torch

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

_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640629")
_DIGITS = 60
"""Digits of the basis values, far beyond float64's 17. `decimal` is deterministic software
arithmetic, so the float64 (or grid integer) each value rounds to is the same on every platform;
it is the correctly rounded one unless the true value lies within ~1e-55 of a rounding tie."""

BASIS_BITS = 22
"""`decode_sign` rounds each basis to integers of magnitude ≤ 2^22."""
SUM_BITS = 52
"""…and each coefficient row to a grid such that any sum of products stays ≤ 2^52 (exact in f64)."""


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


def _cos_series(x: Decimal) -> Decimal:
    total, term, n = Decimal(1), Decimal(1), 0
    while True:
        n += 2
        term = -term * x * x / (n * (n - 1))
        if total + term == total:
            return total
        total += term


@functools.lru_cache(maxsize=64)
def _exact_entries(size: int) -> tuple[tuple[Decimal, ...], Decimal, Decimal]:
    """`(cos(mπ/(2·size)) for m in 0…4·size−1, √(1/size), √(2/size))` to `_DIGITS` digits.

    Entry `(n, k)` of the basis is `cos(((2n+1)k mod 4·size)·π/(2·size))` times the first scale for
    `k = 0` and the second otherwise, so `size + 1` series give the whole matrix. Quadrant
    symmetry makes the zeros (m = size, 3·size) and the ±1 entries exact.
    """
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        quarter = [Decimal(1)]
        quarter += [_cos_series(_PI * j / (2 * size)) for j in range(1, size)]
        quarter.append(Decimal(0))
        signed = []
        for m in range(4 * size):
            if m <= size:
                signed.append(quarter[m])
            elif m <= 2 * size:
                signed.append(-quarter[2 * size - m])
            elif m <= 3 * size:
                signed.append(-quarter[m - 2 * size])
            else:
                signed.append(quarter[4 * size - m])
        return tuple(signed), (Decimal(1) / size).sqrt(), (Decimal(2) / size).sqrt()


def _assemble(size: int, dc: float, cosines: list[float]) -> torch.Tensor:
    """The `size × size` float64 matrix with `dc` in column 0 and `cosines[(2n+1)k mod 4·size]`
    (already scaled) elsewhere; integer index arithmetic only, so it is exact."""
    n = torch.arange(size, dtype=torch.int64).unsqueeze(1)
    k = torch.arange(size, dtype=torch.int64).unsqueeze(0)
    matrix = torch.tensor(cosines, dtype=torch.float64)[((2 * n + 1) * k) % (4 * size)]
    matrix[:, 0] = dc
    return matrix


@functools.lru_cache(maxsize=128)
def _basis(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    cosines, dc, ac = _exact_entries(size)
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        # float(Decimal) rounds correctly in software: every platform gets the same float64 bits.
        basis = _assemble(size, float(dc), [float(c * ac) for c in cosines])
    # Built on the CPU in float64 then moved: some accelerators have no float64 at all.
    return basis.to(device=device, dtype=dtype)


def basis_scale(size: int) -> int:
    """The exponent `e` of the integer basis: the largest with `√(2/size)·2^e ≤ 2^BASIS_BITS`.

    `√(2/size)` bounds every entry (1 when `size = 1`); the test is done on squares in integers.
    """
    bound_num, bound_den = (2, size) if size > 1 else (1, 1)
    e = 0
    while bound_num * 4 ** (e + 1) <= bound_den * 4**BASIS_BITS:
        e += 1
    return e


@functools.lru_cache(maxsize=128)
def _int_basis(size: int, device: torch.device) -> torch.Tensor:
    """`round(F·2^basis_scale(size))`, half to even, as integer-valued float64 on `device`."""
    cosines, dc, ac = _exact_entries(size)
    scale = Decimal(2) ** basis_scale(size)
    with localcontext() as ctx:
        ctx.prec = _DIGITS

        def grid(x: Decimal) -> float:
            return float(int((x * scale).to_integral_value(rounding=ROUND_HALF_EVEN)))

        return _assemble(size, grid(dc), [grid(c * ac) for c in cosines]).to(device)


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


def coefficient_bits(size: int) -> int:
    """Grid bits of a coefficient row summed against a basis of `size`: `SUM_BITS − BASIS_BITS −
    ⌈log2 size⌉`, so that `size` products of at most `2^bits · 2^BASIS_BITS` sum to ≤ 2^52."""
    return SUM_BITS - BASIS_BITS - (size - 1).bit_length()


def _pow2(exponent: torch.Tensor) -> torch.Tensor:
    """`2^exponent` as float64, built from the bit pattern: exact on every device (`ldexp`/`pow`
    go through a libm `pow`, which need not be exact)."""
    biased = (exponent.to(torch.int64).clamp(-1022, 1023) + 1023) << 52
    return biased.view(torch.float64)


def _to_grid(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Round each last-axis row of `x` (fp32 or fp64) to float64 integers of magnitude ≤ 2^bits.

    Returns `(ints, exponent)` with `x ≈ ints · 2^exponent` (exponent per row). The row peak is
    exact (a max), frexp is exact, scaling by a power of two is exact and `round` is half to even
    everywhere, so the integers are the same on every device.
    """
    _, peak_exp = torch.frexp(x.abs().amax(dim=-1, keepdim=True))  # 0 for a zero row
    shift = bits - peak_exp.to(torch.int64)
    # fp32 · fp64 promotes to fp64 in the same pass; the product is exact either way.
    return (x * _pow2(shift)).round_(), -shift


def _exact_rows_times_basis(x: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`x @ F_sizeᵀ` on the grids, exactly: `(ints, exponent)` meaning `ints·2^exponent`."""
    ints, exp = _to_grid(x, coefficient_bits(size))
    basis = _int_basis(size, _normalise(x.device))
    # Integers ≤ 2^52 throughout: exact whatever order or blocking the matmul uses.
    return ints @ basis.T, exp - basis_scale(size)


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
        _check_encoded(x, "decode_sign")
    from psyche.distro.sign_bound import fast_decode_sign_many  # sign_bound imports this module

    return fast_decode_sign_many(encoded, overwrite=overwrite)


def _check_encoded(encoded: torch.Tensor, name: str) -> None:
    if not encoded.is_floating_point():
        raise TypeError(f"{name} needs a floating-point tensor, got {encoded.dtype}")
    if encoded.ndim != 2 and encoded.ndim < 4:
        raise ValueError(
            f"encoded tensor must be 2-D (from a 1-D tensor) or ≥4-D (tiles), "
            f"got shape {tuple(encoded.shape)}"
        )


def decode_sign_exact(encoded: torch.Tensor) -> torch.Tensor:
    """`sign(decode(encoded))`, computed so that every device and thread count gives the same bits.

    The sum `Σ X·B_h·B_w` (or `Σ X·B` for 1-D; docs/distro.md, "DCT chunking") is evaluated on
    integer grids (see the module docstring): the basis rounded to `BASIS_BITS` bits, each row of
    coefficients to `coefficient_bits(size)` bits relative to the row's largest magnitude (24 bits
    for a tile edge of 64, as fp32), the last axis first, then the tile's first axis. Zero rule:
    where that exact sum is 0 the sign is 0, i.e. no update; the same positions are 0 on every
    client.

    Returns {−1, 0, 1} in `encoded`'s dtype and device, in `decode`'s output shape. Runs in
    float64; on devices without float64 (e.g. MPS) it computes on the CPU.
    """
    _check_encoded(encoded, "decode_sign_exact")
    device = encoded.device
    work = device if device.type in ("cpu", "cuda") else torch.device("cpu")
    # bf16/f16 widen exactly; frexp wants fp32 or fp64.
    wide = torch.float64 if encoded.dtype == torch.float64 else torch.float32
    x = encoded.to(device=work, dtype=wide)
    if x.ndim == 2:
        ints, _ = _exact_rows_times_basis(x, x.shape[-1])
        # `+ 0.0` turns a −0 into +0, so the fast path (which never yields −0) matches bit for bit.
        return (torch.sign(ints) + 0.0).reshape(-1).to(device=device, dtype=encoded.dtype)
    *lead, ny, nx, h, w = x.shape
    ints, exp = _exact_rows_times_basis(x, w)
    # Back to values (a power-of-two scale per row: exact) so the columns can share one grid.
    values = ints.mul_(_pow2(exp)).transpose(-1, -2)
    ints, _ = _exact_rows_times_basis(values, h)
    tiles = (torch.sign(ints) + 0.0).transpose(-1, -2)
    return (
        tiles.transpose(-3, -2)
        .reshape(*lead, ny * h, nx * w)
        .to(device=device, dtype=encoded.dtype)
    )
