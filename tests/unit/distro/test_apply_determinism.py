"""Apply gives the same bits on every device, thread count and CPU kernel set (issue 12, #11).

`Distro.apply` moves each weight by `−lr·sign(decode(mean))`. With the inverse DCT as a float
matmul, the sign of a sum that is exactly zero (or tiny) is decided by rounding, which depends on
the kernel's summation order and FMA use, so honest clients on different hardware could move a
weight in opposite directions. `decode_sign` evaluates the sum exactly on integer grids; these
tests pin that down; tests/integration/determinism/test_apply_across_kernels.py (slow: probe
processes per thread count and CPU kernel set) shows the matmul's dependence on the kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from psyche.distro import (
    Distro,
    DistroConfig,
    DistroResult,
    Payload,
    aggregate,
    compress,
    dct_basis,
    decode,
    decode_payload,
    decode_sign,
    encode,
    encode_payload,
)
from psyche.distro.dct_exact import BASIS_BITS, SUM_BITS, basis_scale, coefficient_bits, int_basis

CHUNK, TOPK, LR = 64, 8, 0.01
CPU = torch.device("cpu")


def config(topk: int = TOPK) -> DistroConfig:
    return DistroConfig(
        compression_decay=1.0, compression_topk=topk, compression_chunk=CHUNK, quantize_1bit=False
    )


def random_encoded(shape: tuple[int, ...], seed: int, density: float = 0.05) -> torch.Tensor:
    """A sparse encoded tensor like an aggregated mean (most coefficients chosen by nobody)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * (torch.rand(*shape, generator=g) < density)


# --- the decode itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape", [(40, 64), (7, 3), (5, 1), (2, 3, 64, 64), (3, 2, 44, 64), (4, 29, 12), (1, 1, 1, 1)]
)
def test_decode_sign_is_the_sign_of_the_inverse_dct(shape: tuple[int, ...]) -> None:
    if len(shape) == 3:
        shape = (1, *shape)  # a 2-D tile grid needs two grid axes
    x = random_encoded(shape, seed=sum(shape), density=0.2)
    exact = decode(x.double())
    got = decode_sign(x)
    assert got.shape == exact.shape and got.dtype == x.dtype
    # The grids carry ~24 significant bits, so only sums within ~1e-6 of the tile's scale may
    # round to another sign; none of these random inputs come that close.
    scale = exact.abs().max()
    clear = exact.abs() > 1e-6 * scale
    assert torch.equal(got[clear], torch.sign(exact[clear]).float())
    # Chunks nobody chose a coefficient in decode to exactly 0: no update there.
    empty = exact == 0
    assert not got[empty].any() and bool((clear | empty).all())


def test_basis_is_exact_where_the_cosine_is_zero_or_one() -> None:
    # cos(π/2) is 6e-17 in float arithmetic; the decimal construction makes it exactly 0.
    assert dct_basis(3, torch.float64)[1, 1].item() == 0.0
    assert int_basis(3, CPU)[1, 1].item() == 0.0
    assert dct_basis(12, torch.float64)[1, 4].item() == 0.0  # (2·1+1)·4 = 12
    assert dct_basis(64, torch.float64)[0, 0].item() == 0.125  # √(1/64)


@pytest.mark.parametrize("size", [1, 2, 3, 12, 29, 44, 64, 96, 128, 257, 512])
def test_grids_keep_every_partial_sum_exact_in_float64(size: int) -> None:
    basis = int_basis(size, CPU)
    assert torch.equal(basis, basis.round()) and basis.abs().max() <= 2**BASIS_BITS
    # Worst case: every coefficient at the grid's largest magnitude with the basis entry's sign.
    assert size * 2 ** coefficient_bits(size) * basis.abs().max().item() <= 2**SUM_BITS
    scaled = basis / 2 ** basis_scale(size)
    assert torch.allclose(scaled, dct_basis(size, torch.float64), rtol=0, atol=2.0**-BASIS_BITS)


def test_zero_rule_an_exactly_zero_sum_gives_no_update() -> None:
    # One coefficient at k = 1 of a 3-chunk: the inverse DCT is v·F[:, 1] = v·(√½, 0, −√½).
    x = torch.tensor([[0.0, 0.7, 0.0]])
    assert torch.equal(decode_sign(x), torch.tensor([1.0, 0.0, -1.0]))
    # An all-zero tile (nobody chose a coefficient, or the peers' values cancelled) stays put.
    assert torch.equal(decode_sign(torch.zeros(1, 1, 8, 8)), torch.zeros(8, 8))


def test_apply_leaves_weights_whose_exact_update_is_zero() -> None:
    weights = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    distro = Distro([("z", weights)], config(topk=3))
    idx = torch.tensor([[1, 0, 2]])
    payload = Payload(
        step=1,
        batch_start=0,
        batch_end=0,
        trainer_nonce=0,
        quantized=False,
        results=(DistroResult(idx, torch.tensor([[0.5, 0.0, 0.0]]), (1, 3), 3),),
    )
    distro.apply([payload], LR)
    # The matmul apply moved the middle weight too: its float cosine was 6e-17, not 0.
    expected = torch.tensor([1.0, 2.0, 3.0]) - LR * torch.tensor([1.0, 0.0, -1.0])
    assert torch.equal(weights.detach(), expected) and weights[1].item() == 2.0


def bf16_round(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One round on bf16 weights on `device`: weight decay, then apply. Returns the start
    weights, the update's signs (CPU) and the end weights (CPU)."""
    g = torch.Generator().manual_seed(3)
    w0 = (torch.rand(128, 64, generator=g) * 0.04 - 0.02).to(torch.bfloat16)
    w = torch.nn.Parameter(w0.clone().to(device))
    cfg = DistroConfig(compression_decay=1.0, compression_topk=TOPK, compression_chunk=CHUNK,
                       quantize_1bit=False, weight_decay=0.1)  # fmt: skip
    distro = Distro([("w", w)], cfg)
    result = compress(encode(torch.randn(128, 64, generator=g), CHUNK), TOPK)
    payload = Payload(step=1, batch_start=0, batch_end=0, trainer_nonce=0, quantized=False,
                      results=(result,))  # fmt: skip
    distro.cancel(LR)  # the round's weight decay
    distro.apply([payload], LR)
    sign = decode_sign(aggregate([result], torch.float32, CPU, distinct=True)).reshape(128, 64)
    return w0, sign, w.detach().cpu()


def test_a_bf16_step_is_float32_arithmetic_rounded_once() -> None:
    """A client holds bf16 weights on CUDA (psyche.training.device); a CPU can hold them too. The
    step is `bf16(fp32(p) − fp32(lr)·sign)`, one rounding, on every device. torch's CPU
    `sub_(x, alpha=lr)` on a bf16 tensor rounded `lr` itself to bf16 first (0.01 → 0.0100098),
    CUDA's did not, so the same weights stepped apart (bench/apply_across_devices.py, H200)."""
    w0, sign, got = bf16_round("cpu")
    decayed = (w0.float() * (1.0 - LR * 0.1)).to(torch.bfloat16)
    want = (decayed.float() - LR * sign).to(torch.bfloat16)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    old = decayed.clone().sub_(sign.to(torch.bfloat16), alpha=LR)  # what the CPU did before
    assert not torch.equal(old.view(torch.int16), want.view(torch.int16))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CPU-vs-CUDA needs a GPU")
def test_a_bf16_step_on_cuda_matches_cpu_bit_for_bit() -> None:
    assert torch.equal(
        bf16_round("cpu")[2].view(torch.int16), bf16_round("cuda")[2].view(torch.int16)
    )


# --- threads, kernels, devices ------------------------------------------------------------------


def probe_inputs() -> dict[str, object]:
    """Weights and two peers' payloads whose mean is antisymmetric in every 64×64 tile of `anti`,
    so its inverse DCT is zero on the tiles' diagonals in exact arithmetic (there a float matmul's
    rounding picks the sign), plus random parameters."""
    rng = np.random.default_rng(7)
    params = {
        "anti": torch.from_numpy(rng.standard_normal((128, 128)).astype(np.float32)),
        "bias": torch.from_numpy(rng.standard_normal(64).astype(np.float32)),
        "rand": torch.from_numpy(rng.standard_normal((64, 128)).astype(np.float32)),
        "z": torch.from_numpy(rng.standard_normal(3).astype(np.float32)),
    }
    spec = Distro([(n, torch.nn.Parameter(t)) for n, t in params.items()], config()).payload_spec
    peers: list[list[DistroResult]] = [[], []]
    for t in spec.tensors:
        grid = t.xshape[:-2] if len(t.xshape) > 2 else t.xshape[:-1]
        tiles = int(np.prod(grid))
        if t.name == "anti":
            ia, ib, va = [], [], []
            for _ in range(tiles):
                pairs: set[tuple[int, int]] = set()
                while len(pairs) < t.k:
                    a, b = sorted(rng.choice(64, size=2, replace=False).tolist())
                    pairs.add((a, b))
                ia.append([a * 64 + b for a, b in sorted(pairs)])
                ib.append([b * 64 + a for a, b in sorted(pairs)])
                va.append(rng.standard_normal(t.k).astype(np.float32).tolist())
            a_val = torch.tensor(va).reshape(*grid, t.k)
            peers[0].append(
                DistroResult(torch.tensor(ia).reshape(*grid, t.k), a_val, t.xshape, t.totalk)
            )
            peers[1].append(
                DistroResult(torch.tensor(ib).reshape(*grid, t.k), -a_val, t.xshape, t.totalk)
            )
            continue
        for peer in peers:
            idx = torch.stack(
                [torch.from_numpy(rng.permutation(t.totalk)[: t.k]) for _ in range(tiles)]
            )
            val = torch.from_numpy(rng.standard_normal((tiles, t.k)).astype(np.float32))
            peer.append(
                DistroResult(idx.reshape(*grid, t.k), val.reshape(*grid, t.k), t.xshape, t.totalk)
            )
    payloads = [
        Payload(
            step=1, batch_start=i, batch_end=i, trainer_nonce=0, quantized=False, results=tuple(r)
        )
        for i, r in enumerate(peers)
    ]
    wire = [encode_payload(p) for p in payloads]
    decoded = [decode_payload(b, spec) for b in wire]
    dense = [
        aggregate([p.results[n] for p in decoded], distinct=True) for n in range(len(spec.tensors))
    ]
    dense.append(random_encoded((3, 5, 64, 64), seed=11, density=0.01))
    return {
        "params": params,
        "payloads": [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in wire],
        "lr": LR,
        "chunk": CHUNK,
        "topk": TOPK,
        "dense": dense,
    }


def test_decode_sign_same_bits_for_one_and_two_threads() -> None:
    inputs = probe_inputs()
    dense = inputs["dense"]
    assert isinstance(dense, list)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [decode_sign(x) for x in dense]
        torch.set_num_threads(2)
        two = [decode_sign(x) for x in dense]
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


def test_float_reductions_depend_on_the_thread_count() -> None:
    """Why exact arithmetic: a float sum's bits follow its order, and the order follows the
    threads. (This box's MKL keeps the decode's short 64-term dot products in one thread, so the
    matmul decode happens to agree across thread counts here; the kernel set does not: see
    tests/integration/determinism/test_apply_across_kernels.py.)"""
    x = torch.randn(4_000_000, generator=torch.Generator().manual_seed(0))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = x.sum()
        torch.set_num_threads(2)
        two = x.sum()
    finally:
        torch.set_num_threads(before)
    assert one.item() != two.item()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CPU-vs-CUDA needs a GPU")
def test_apply_on_cuda_matches_cpu_bit_for_bit() -> None:
    inputs = probe_inputs()
    results = {}
    for device in ("cpu", "cuda"):
        params = {
            n: torch.nn.Parameter(t.clone().to(device))
            for n, t in inputs["params"].items()  # type: ignore[attr-defined]
        }
        distro = Distro(params.items(), config())
        payloads = [
            decode_payload(b.numpy().tobytes(), distro.payload_spec)
            for b in inputs["payloads"]  # type: ignore[attr-defined]
        ]
        distro.apply(payloads, LR)
        signs = [decode_sign(x.to(device)).cpu() for x in inputs["dense"]]  # type: ignore[attr-defined]
        results[device] = ({n: p.detach().cpu() for n, p in params.items()}, signs)
    cpu, cuda = results["cpu"], results["cuda"]
    assert all(torch.equal(cpu[0][n], cuda[0][n]) for n in cpu[0])
    assert all(torch.equal(a, b) for a, b in zip(cpu[1], cuda[1], strict=True))
