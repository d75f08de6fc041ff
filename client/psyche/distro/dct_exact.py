"""The DCT-II basis computed exactly, and the integer-grid evaluation of the apply's sign decode.

Shared by `psyche.distro.dct` (the transforms and `decode_sign`) and `psyche.distro.sign_bound`
(the fast path of `decode_sign`, whose proven bound is stated on these grids), so that neither
reaches into the other.

**The basis.** Unlike the reference (bf16 bases built in f32), each basis entry is the exact value
rounded once to float64 (computed with `decimal`, so no platform's `cos` is involved) and cast once
to the compute dtype; `Distro` runs the transforms in fp32 even for bf16 models (docs/protocol.md,
"Known flaws of the reference", flaw 23). Basis matrices are cached per (size, dtype, device) and
must be treated as read-only.

**The grids.** `decode_sign` is the inverse transform that every client runs on the consensus
result set at apply time, where honest clients must agree bit for bit whatever their CPU, GPU or
thread count. A float matmul cannot promise that: its summation order (and whether it fuses
multiply-adds) depends on the kernel, so where the exact sum is zero or tiny its sign is decided by
rounding. `decode_sign_exact` therefore evaluates the same sum exactly: the basis and the
coefficients are first rounded to integer grids small enough that every product and every partial
sum is an integer below 2^53, and a float64 matmul of such integers is exact in any order, blocking
or FMA use. Only the sign of the result is kept, so the grids' power-of-two scales never need
undoing at the end. docs/distro.md has the rule and its costs.
"""

from __future__ import annotations

import functools
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import torch

__all__ = [
    "BASIS_BITS",
    "SUM_BITS",
    "basis_scale",
    "check_encoded",
    "coefficient_bits",
    "decode_sign_exact",
    "exact_rows_times_basis",
    "float_basis",
    "int_basis",
    "normalise_device",
    "pow2",
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
def float_basis(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The orthonormal DCT-II matrix of `size`, each entry correctly rounded to float64 and then
    cast to `dtype`, on `device` (normalised: :func:`normalise_device`). Cached and shared."""
    cosines, dc, ac = _exact_entries(size)
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        # float(Decimal) rounds correctly in software: every platform gets the same float64 bits.
        basis = _assemble(size, float(dc), [float(c * ac) for c in cosines])
    # Built on the CPU in float64 then moved: some accelerators have no float64 at all.
    return basis.to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=128)
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
def int_basis(size: int, device: torch.device) -> torch.Tensor:
    """`round(F·2^basis_scale(size))`, half to even, as integer-valued float64 on `device`."""
    cosines, dc, ac = _exact_entries(size)
    scale = Decimal(2) ** basis_scale(size)
    with localcontext() as ctx:
        ctx.prec = _DIGITS

        def grid(x: Decimal) -> float:
            return float(int((x * scale).to_integral_value(rounding=ROUND_HALF_EVEN)))

        return _assemble(size, grid(dc), [grid(c * ac) for c in cosines]).to(device)


def normalise_device(device: torch.device | str | None) -> torch.device:
    """`device` as the cache key of the bases (None is the CPU)."""
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and device.index is None:
        # "cuda" and "cuda:0" must share one cache entry.
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def coefficient_bits(size: int) -> int:
    """Grid bits of a coefficient row summed against a basis of `size`: `SUM_BITS − BASIS_BITS −
    ⌈log2 size⌉`, so that `size` products of at most `2^bits · 2^BASIS_BITS` sum to ≤ 2^52."""
    return SUM_BITS - BASIS_BITS - (size - 1).bit_length()


def pow2(exponent: torch.Tensor) -> torch.Tensor:
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
    return (x * pow2(shift)).round_(), -shift


def exact_rows_times_basis(x: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`x @ F_sizeᵀ` on the grids, exactly: `(ints, exponent)` meaning `ints·2^exponent`."""
    ints, exp = _to_grid(x, coefficient_bits(size))
    basis = int_basis(size, normalise_device(x.device))
    # Integers ≤ 2^52 throughout: exact whatever order or blocking the matmul uses.
    return ints @ basis.T, exp - basis_scale(size)


def check_encoded(encoded: torch.Tensor, name: str) -> None:
    """Raise unless `encoded` has a shape `encode` gives (2-D, or tiles ≥4-D) and floats;
    ``name`` is the caller's, for the message."""
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
    check_encoded(encoded, "decode_sign_exact")
    device = encoded.device
    work = device if device.type in ("cpu", "cuda") else torch.device("cpu")
    # bf16/f16 widen exactly; frexp wants fp32 or fp64.
    wide = torch.float64 if encoded.dtype == torch.float64 else torch.float32
    x = encoded.to(device=work, dtype=wide)
    if x.ndim == 2:
        ints, _ = exact_rows_times_basis(x, x.shape[-1])
        # `+ 0.0` turns a −0 into +0, so the fast path (which never yields −0) matches bit for bit.
        return (torch.sign(ints) + 0.0).reshape(-1).to(device=device, dtype=encoded.dtype)
    *lead, ny, nx, h, w = x.shape
    ints, exp = exact_rows_times_basis(x, w)
    # Back to values (a power-of-two scale per row: exact) so the columns can share one grid.
    values = ints.mul_(pow2(exp)).transpose(-1, -2)
    ints, _ = exact_rows_times_basis(values, h)
    tiles = (torch.sign(ints) + 0.0).transpose(-1, -2)
    return (
        tiles.transpose(-3, -2)
        .reshape(*lead, ny * h, nx * w)
        .to(device=device, dtype=encoded.dtype)
    )
