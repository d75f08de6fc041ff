"""SparseLoCo's math core and wire format (`psyche.distro.sparseloco`, `sparseloco_payload`)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psyche.distro import PayloadError
from psyche.distro import sparseloco as sl
from psyche.distro.sparseloco_payload import (
    SparseLoCoPayload,
    SparseTensor,
    encode_payload,
    tensor_groups,
)

SHAPES = [(10, 30), (7,), (200,), (3, 1, 5)]
FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
HEADER = 3 + 1 + 8 + 4 + 1 + 4 + 4 + 4 + 8


def make_settings(bits: int = 2, chunk: int = 64, k: int = 4, **kw: float) -> sl.SparseLoCoSettings:
    return sl.SparseLoCoSettings(
        topk_chunk=chunk, topk=k, value_bits=bits, error_decay=kw.get("decay", 0.95),
        outer_momentum=kw.get("momentum", 0.0),
    )  # fmt: skip


def rand_params(shapes: list[tuple[int, ...]], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


def one_round(
    s: sl.SparseLoCoSettings, seed: int = 0, shapes: list[tuple[int, ...]] = SHAPES
) -> tuple[sl.SparseLoCoState, list[torch.Tensor], list[torch.Tensor], bytes]:
    state = sl.SparseLoCoState(shapes, s)
    start = rand_params(shapes, seed)
    end = [p - 0.01 * q for p, q in zip(start, rand_params(shapes, seed + 1), strict=True)]
    return state, start, end, sl.encode_round(state, start, end, step=5, nonce=9)


def dense(payload: SparseLoCoPayload, state: sl.SparseLoCoState) -> list[torch.Tensor]:
    out = []
    for t, groups, shape in zip(payload.tensors, state.groups, state.shapes, strict=True):
        idx, vals = t.flat(groups)
        x = torch.zeros(int(np.prod(shape)), dtype=torch.float32)
        x[idx] = vals
        out.append(x)
    return out


# --- layout, size, round trip -------------------------------------------------------------------


def test_groups_cover_every_element_once() -> None:
    s = make_settings(chunk=64, k=4)
    assert tensor_groups(300, s) == (
        sl_group(0, 4, 64, 4),
        sl_group(256, 1, 44, 4),
    )
    assert tensor_groups(3, s) == (sl_group(0, 1, 3, 3),)
    assert tensor_groups(128, s) == (sl_group(0, 2, 64, 4),)
    assert tensor_groups(0, s) == ()


def sl_group(start: int, chunks: int, n: int, k: int) -> object:
    from psyche.distro.sparseloco_payload import ChunkGroup

    return ChunkGroup(start, chunks, n, k)


@pytest.mark.parametrize("bits", [1, 2])
def test_round_trip_is_canonical_and_of_the_announced_size(bits: int) -> None:
    s = make_settings(bits)
    state, _, _, wire = one_round(s)
    assert len(wire) == sl.max_payload_bytes(SHAPES, s)
    decoded = sl.decode_payload(wire, SHAPES, s)
    assert (decoded.step, decoded.trainer_nonce) == (5, 9)
    assert encode_payload(decoded, SHAPES, s) == wire
    for t, groups in zip(decoded.tensors, state.groups, strict=True):
        for g, idx in zip(groups, t.indices, strict=True):
            assert idx.shape == (g.chunks, g.k)
            assert (np.diff(idx, axis=1) > 0).all()
            assert int(idx.max()) < g.n


def test_size_formula_for_the_shipped_setting() -> None:
    """4,096-element chunks, 32 kept, 2 bits: Elias–Fano 7 low bits (224) + 63 high bits,
    64 value bits and two bf16 scales = 383 bits per chunk."""
    s = make_settings(2, chunk=4096, k=32)
    shapes = [(256, 256)]  # 16 chunks
    assert sl.max_payload_bytes(shapes, s) == HEADER + 16 * 2 * 2 + (16 * (287 + 64) + 7) // 8


# --- the math: top-k, quantization, error feedback -----------------------------------------------


@pytest.mark.parametrize("bits", [1, 2])
@pytest.mark.parametrize("decay", [1.0, 0.9])
def test_error_feedback_keeps_what_was_not_sent(bits: int, decay: float) -> None:
    s = make_settings(bits, decay=decay)
    state = sl.SparseLoCoState(SHAPES, s)
    prev_error = [
        torch.randn(e.shape, generator=torch.Generator().manual_seed(3)) for e in state.error
    ]
    for e, p in zip(state.error, prev_error, strict=True):
        e.copy_(p)
    start = rand_params(SHAPES, 0)
    end = [p - 0.01 * q for p, q in zip(start, rand_params(SHAPES, 1), strict=True)]
    wire = sl.encode_round(state, start, end, step=0)
    sent = dense(sl.decode_payload(wire, SHAPES, s), state)
    for e_old, e_new, c, a, b, groups in zip(
        prev_error, state.error, sent, start, end, state.groups, strict=True
    ):
        x = decay * e_old + (a - b).reshape(-1)
        torch.testing.assert_close(e_new + c, x, rtol=0, atol=1e-6)
        for g in groups:  # exactly k entries per chunk, the k largest in magnitude
            xc = x[g.start : g.start + g.chunks * g.n].view(g.chunks, g.n)
            cc = c[g.start : g.start + g.chunks * g.n].view(g.chunks, g.n)
            kept = cc != 0
            assert (kept.sum(1) <= g.k).all()
            kth = xc.abs().topk(g.k, dim=1).values[:, -1:]
            assert (xc.abs()[kept] >= kth.expand_as(xc)[kept] - 1e-7).all()
            assert (torch.sign(cc[kept]) == torch.sign(xc[kept])).all()


def test_two_bits_are_closer_than_one() -> None:
    errs = {}
    for bits in (1, 2):
        state, start, end, wire = one_round(make_settings(bits))
        sent = dense(sl.decode_payload(wire, SHAPES, state.settings), state)
        kept = [c != 0 for c in sent]
        x = [(a - b).reshape(-1) for a, b in zip(start, end, strict=True)]
        errs[bits] = sum(
            float(((xi - c)[m] ** 2).sum()) for xi, c, m in zip(x, sent, kept, strict=True)
        )
    assert errs[2] < errs[1]


def test_one_bit_level_is_the_mean_kept_magnitude() -> None:
    s = make_settings(1, chunk=8, k=3)
    state = sl.SparseLoCoState([(8,)], s)
    delta = torch.tensor([0.0, 4.0, -1.0, 0.5, -2.0, 0.0, 0.25, 3.0])
    wire = sl.encode_round(state, [delta], [torch.zeros(8)], step=0)
    sent = dense(sl.decode_payload(wire, [(8,)], s), state)[0]
    assert sent.tolist() == [0.0, 3.0, 0.0, 0.0, -3.0, 0.0, 0.0, 3.0]


def test_errors_are_sent_eventually() -> None:
    """β = 1, one client, outer LR 1: after the error is flushed, weights moved by exactly the
    sum of the pseudo-gradients (what was not sent is in the buffer, not lost)."""
    s = make_settings(2, chunk=16, k=4, decay=1.0)
    shapes = [(64,)]
    state = sl.SparseLoCoState(shapes, s)
    params = [torch.zeros(64)]
    delta = torch.linspace(-1, 1, 64)
    total = torch.zeros(64)
    for r in range(12):
        d = delta if r < 4 else torch.zeros(64)
        total += d
        start = [params[0].clone()]
        wire = sl.encode_round(state, start, [start[0] - d], step=r)
        sl.outer_apply(params, [sl.decode_payload(wire, shapes, s)], state, s, 1.0)
    torch.testing.assert_close(-params[0] + state.error[0], total, rtol=0, atol=1e-5)
    assert float(state.error[0].abs().max()) < 0.05 * float(total.abs().max())


def test_encode_refuses_a_non_finite_pseudo_gradient() -> None:
    s = make_settings()
    state = sl.SparseLoCoState([(8,)], s)
    with pytest.raises(PayloadError, match="not finite"):
        sl.encode_round(state, [torch.full((8,), float("nan"))], [torch.zeros(8)], step=0)


# --- outer step ---------------------------------------------------------------------------------


def test_outer_apply_is_the_float64_mean_rounded_once() -> None:
    s = make_settings(2)
    wires, states = [], []
    start = rand_params(SHAPES, 0)
    for c in range(3):
        state = sl.SparseLoCoState(SHAPES, s)
        end = [p - 0.01 * q for p, q in zip(start, rand_params(SHAPES, 10 + c), strict=True)]
        wires.append(sl.encode_round(state, start, end, step=0, nonce=c))
        states.append(state)
    decoded = [sl.decode_payload(w, SHAPES, s) for w in wires]
    params = [p.clone() for p in start]
    sl.outer_apply(params, decoded, states[0], s, 0.7)
    sent = [dense(d, states[0]) for d in decoded]
    for i, (p, p0) in enumerate(zip(params, start, strict=True)):
        acc = torch.zeros(p0.numel(), dtype=torch.float64)
        for c in range(3):
            acc = acc + sent[c][i].double()
        want = (p0.reshape(-1).double() - (acc / 3) * 0.7).float().view(p0.shape)
        assert torch.equal(p, want)


def test_momentum_state_round_trips_and_is_checked() -> None:
    s = make_settings(momentum=0.9)
    state, start, _, wire = one_round(s)
    params = [p.clone() for p in start]
    sl.outer_apply(params, [sl.decode_payload(wire, SHAPES, s)], state, s, 1.0)
    saved = state.state_dict()
    assert set(saved) == {f"momentum.{i}" for i in range(len(SHAPES))}
    other = sl.SparseLoCoState(SHAPES, s)
    other.load_state_dict(saved)
    assert other.momentum is not None and state.momentum is not None
    assert all(torch.equal(a, b) for a, b in zip(other.momentum, state.momentum, strict=True))
    # the private error buffer is not part of it: a joiner restarts it at zero
    assert all(float(e.abs().sum()) == 0 for e in other.error)
    with pytest.raises(ValueError, match="keys"):
        other.load_state_dict({})
    bad = dict(saved)
    bad["momentum.0"] = saved["momentum.0"].double()
    with pytest.raises(ValueError, match=r"momentum\.0"):
        other.load_state_dict(bad)
    assert sl.SparseLoCoState(SHAPES, make_settings()).state_dict() == {}


def test_settings_are_checked() -> None:
    for kw in (
        {"value_bits": 3}, {"topk": 0}, {"topk": 65}, {"error_decay": 0.0},
        {"error_decay": 1.5}, {"outer_momentum": 1.0}, {"topk_chunk": 0},
    ):  # fmt: skip
        args = {"topk_chunk": 64, "topk": 4, "value_bits": 2, "error_decay": 0.9, **kw}
        with pytest.raises(ValueError):
            sl.SparseLoCoSettings(**args)  # type: ignore[arg-type]


# --- strict decoding ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wires() -> dict[int, bytes]:
    return {bits: one_round(make_settings(bits))[3] for bits in (1, 2)}


def _refused(data: bytes, bits: int) -> bool:
    try:
        sl.decode_payload(data, SHAPES, make_settings(bits))
    except PayloadError:
        return True
    return False


@FUZZ
@given(bits=st.sampled_from([1, 2]), cut=st.integers(0, 10_000))
def test_truncated_payloads_are_refused(wires: dict[int, bytes], bits: int, cut: int) -> None:
    w = wires[bits]
    assert _refused(w[: cut % len(w)], bits)


@FUZZ
@given(bits=st.sampled_from([1, 2]), extra=st.binary(min_size=1, max_size=20))
def test_extended_payloads_are_refused(wires: dict[int, bytes], bits: int, extra: bytes) -> None:
    assert _refused(wires[bits] + extra, bits)


@FUZZ
@given(bits=st.sampled_from([1, 2]), flips=st.lists(st.integers(0, 10**6), min_size=1, max_size=3))
def test_mutated_payloads_are_refused_or_canonical(
    wires: dict[int, bytes], bits: int, flips: list[int]
) -> None:
    """Any accepted byte string is the one encoding of what it decodes to (canonical form)."""
    data = bytearray(wires[bits])
    for f in flips:
        data[(f // 8) % len(data)] ^= 1 << (f % 8)
    s = make_settings(bits)
    try:
        decoded = sl.decode_payload(bytes(data), SHAPES, s)
    except PayloadError:
        return
    assert encode_payload(decoded, SHAPES, s) == bytes(data)


def test_wrong_settings_or_model_are_refused(wires: dict[int, bytes]) -> None:
    w = wires[2]
    for s, shapes in (
        (make_settings(1), SHAPES),
        (make_settings(2, k=3), SHAPES),
        (make_settings(2), [*SHAPES[:-1], (5, 3)]),  # same sizes, other shapes
    ):
        with pytest.raises(PayloadError):
            sl.decode_payload(w, shapes, s)


def _with_tensor(payload: SparseLoCoPayload, i: int, **change: object) -> SparseLoCoPayload:
    t = payload.tensors[i]
    fields = {f: getattr(t, f) for f in ("indices", "signs", "mags", "scales")}
    fields.update(change)
    tensors = list(payload.tensors)
    tensors[i] = SparseTensor(**fields)
    return SparseLoCoPayload(payload.step, payload.trainer_nonce, tuple(tensors))


def _edit(arrays: tuple[np.ndarray, ...], g: int, fn: object) -> tuple[np.ndarray, ...]:
    out = [a.copy() for a in arrays]
    fn(out[g])  # type: ignore[operator]
    return tuple(out)


@pytest.mark.parametrize(
    ("what", "field", "group", "edit", "message"),
    [
        (
            "index past a short chunk",
            "indices",
            1,
            lambda a: a.__setitem__((0, -1), 44),
            "not below",
        ),
        ("repeated index", "indices", 0, lambda a: a.__setitem__((0, 1), a[0, 0]), "increasing"),
        (
            "negative scale",
            "scales",
            0,
            lambda a: a.__setitem__((0, 0), a[0, 0] | 0x8000),
            "sign bit",
        ),
        ("NaN scale", "scales", 0, lambda a: a.__setitem__((0, 1), 0x7FC0), "not finite"),
        ("lo above hi", "scales", 0, lambda a: a.__setitem__((0, 0), a[0, 1] + 1), "lo > hi"),
        ("hi unused", "mags", 0, lambda a: a.__setitem__(0, 0), "hi level"),
        ("zero with a sign", "scales", 0, lambda a: a.__setitem__((0, 0), 0), None),
    ],
)
def test_non_canonical_forms_are_refused(
    what: str, field: str, group: int, edit: object, message: str | None
) -> None:
    s = make_settings(2)
    _, _, _, wire = one_round(s, shapes=[(300,)])
    payload = sl.decode_payload(wire, [(300,)], s)
    t = payload.tensors[0]
    changed = _edit(getattr(t, field), group, edit)
    if what == "zero with a sign":  # lo = 0 with a lo entry whose sign bit is 1
        signs = _edit(t.signs, 0, lambda a: a.__setitem__(0, 1))
        mags = _edit(t.mags, 0, lambda a: a.__setitem__((0, 0), 0))
        bad = _with_tensor(payload, 0, scales=changed, signs=signs, mags=mags)
        message = "sign"
    else:
        bad = _with_tensor(payload, 0, **{field: changed})
    with pytest.raises(PayloadError, match=message):
        sl.decode_payload(encode_payload(bad, [(300,)], s), [(300,)], s)


def test_non_zero_padding_is_refused() -> None:
    s = make_settings(1, chunk=8, k=3)
    shapes = [(9,)]  # bits: EF(8,3)+3 signs, EF(1,1)=0 + 1 sign → not a byte multiple
    state = sl.SparseLoCoState(shapes, s)
    wire = bytearray(sl.encode_round(state, [torch.arange(9.0)], [torch.zeros(9)], step=0))
    wire[-1] |= 0x80
    with pytest.raises(PayloadError, match="padding"):
        sl.decode_payload(bytes(wire), shapes, s)


def test_header_fields_are_checked(wires: dict[int, bytes]) -> None:
    w = bytearray(wires[2])
    w[0:3] = b"PDT"
    assert _refused(bytes(w), 2)
    w = bytearray(wires[2])
    struct.pack_into("<B", w, 3, 2)  # version
    assert _refused(bytes(w), 2)


def test_equal_magnitudes_whose_mean_rounds_below_them_quantize_to_one_finite_level() -> None:
    """Issue 40's dropped round: k equal magnitudes (a fresh inner AdamW moves every weight by
    the same lr) whose float32 mean rounds below them all compare above it, so the 2-bit lo
    group was empty and its mean 0/0: a NaN scale and a NonFiniteGradient. Now: one level."""
    import torch

    from psyche.distro.sparseloco_payload import ChunkGroup

    k = 8
    for i in range(1, 10_000):
        v = i * 1.37e-7
        x = torch.full((1, k), v, dtype=torch.float32)
        if bool((x > x.mean(dim=1, keepdim=True)).all()):
            break
    else:
        pytest.fail("no magnitude whose mean of 8 rounds below it")
    x = torch.cat([x, torch.zeros(1, 56)], dim=1) * torch.tensor([1.0, -1.0] * 32)
    _, _, mags, scales, values = sl.quantize(x, ChunkGroup(0, 1, 64, k), 2)
    assert bool(torch.isfinite(values).all())
    assert int(scales[0, 0]) == int(scales[0, 1])  # one level
    assert mags.sum() == 0
    assert torch.equal(values.abs(), torch.full((1, k), float(values.abs()[0, 0])))
    assert float(values.abs()[0, 0]) == pytest.approx(v, rel=1e-2)
