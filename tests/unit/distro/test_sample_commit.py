"""Per-sample commitments (issue 39 item 1): the probe, the v2 payload's commitments section
(round trip, size bound, every refusal), and the verifiable lookahead."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from psyche.distro import Distro, PayloadError, PayloadSpec, decode_payload, encode_payload
from psyche.distro.payload_commit import SECTION_MAX_BYTES
from psyche.distro.sample_commit import (
    COORDS,
    MAX_GROUPS,
    NO_LOOKAHEAD,
    PROJECTIONS,
    Probe,
    SampleCommitments,
    agreement,
    probe_seed,
)

from .test_payload_v2 import SHAPES, config, make_payload

WIDEST = (0xFFFF_FFFF, 1 << 63, (1 << 64) - 1, 0xFFFF_FFFF)


def _spec(commitments: bool, quantize: bool = False) -> PayloadSpec:
    return PayloadSpec.from_model(SHAPES, config(quantize), commitments=commitments)


def _commitments(groups: int = 8, group: int = 1) -> SampleCommitments:
    values = torch.randn(groups, PROJECTIONS, generator=torch.Generator().manual_seed(groups))
    return SampleCommitments(group, values, b"\x11" * 32)


@pytest.mark.parametrize("quantize", [False, True])
def test_the_section_round_trips_in_f16(quantize: bool) -> None:
    spec = _spec(True, quantize)
    c = _commitments(5, 2)
    payload = dataclasses.replace(make_payload(SHAPES, config(quantize)), commitments=c)
    data = encode_payload(payload)
    back = decode_payload(data, spec).commitments
    assert back is not None and back.group == 2 and back.lookahead == b"\x11" * 32
    assert torch.equal(back.values, c.values.half().float())
    assert len(data) <= spec.max_bytes
    assert encode_payload(dataclasses.replace(payload, commitments=back)) == data  # canonical


def test_the_size_bound_covers_the_most_groups_and_the_widest_header() -> None:
    spec = _spec(True)
    assert spec.max_bytes == _spec(False).max_bytes + SECTION_MAX_BYTES
    payload = make_payload(SHAPES, config(), header=WIDEST)
    data = encode_payload(dataclasses.replace(payload, commitments=_commitments(MAX_GROUPS)))
    assert len(data) == spec.max_bytes
    with pytest.raises(PayloadError, match="commitments must be"):
        encode_payload(dataclasses.replace(payload, commitments=_commitments(MAX_GROUPS + 1)))


def test_a_run_takes_commitments_from_all_or_from_none() -> None:
    plain = make_payload(SHAPES, config())
    with_c = dataclasses.replace(plain, commitments=_commitments())
    with pytest.raises(PayloadError, match="commitments missing; the run requires them"):
        decode_payload(encode_payload(plain), _spec(True))
    with pytest.raises(PayloadError, match="oversized"):  # refused before a byte is parsed
        decode_payload(encode_payload(with_c), _spec(False))
    assert decode_payload(encode_payload(plain), _spec(False)).commitments is None
    with pytest.raises(PayloadError, match="need payload format v2"):
        encode_payload(with_c, 1)
    with pytest.raises(ValueError, match="need payload format v2"):
        PayloadSpec.from_model(SHAPES, config(), version=1, commitments=True)


def test_a_bad_section_is_refused() -> None:
    spec = _spec(True)
    data = encode_payload(
        dataclasses.replace(make_payload(SHAPES, config()), commitments=_commitments(2))
    )
    section = len(data) - (36 + 2 * PROJECTIONS * 2)
    for size in (section + 10, len(data) - 1):
        with pytest.raises(PayloadError):
            decode_payload(data[:size], spec)
    with pytest.raises(PayloadError, match="value bytes"):
        decode_payload(data + b"\0\0", spec)
    nan = bytearray(data)
    nan[section + 36 : section + 38] = b"\x00\x7e"  # f16 NaN
    with pytest.raises(PayloadError, match="NaN"):
        decode_payload(bytes(nan), spec)
    zero = bytearray(data)
    zero[section : section + 2] = b"\0\0"  # group 0
    with pytest.raises(PayloadError, match="out of range"):
        decode_payload(bytes(zero), spec)


def test_the_probe_follows_the_step_and_spreads_over_every_tensor() -> None:
    shapes = [(64, 64), (64,), (300, 7)]
    a, b = Probe.for_shapes(shapes, probe_seed(3)), Probe.for_shapes(shapes, probe_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a.indices, b.indices, strict=True))
    assert torch.equal(a.signs, b.signs)
    c = Probe.for_shapes(shapes, probe_seed(4))
    assert not torch.equal(a.indices[0], c.indices[0])
    assert all(i.numel() >= 1 for i in a.indices)
    assert abs(sum(i.numel() for i in a.indices) - COORDS) <= len(shapes)
    assert a.signs.shape == (PROJECTIONS, sum(i.numel() for i in a.indices))
    grads = [torch.randn(s) for s in shapes]
    fp = a.project(a.gather(grads))
    assert agreement(fp, a.project(a.gather(grads))) == pytest.approx(1.0)
    assert agreement(fp, torch.zeros_like(fp)) == 0.0


def test_the_verifiable_lookahead_steps_like_apply_on_the_previous_result() -> None:
    torch.manual_seed(0)
    weights = {"a.bias": torch.randn(8), "b.weight": torch.randn(4, 6)}
    cfg = config(quantize=True)

    def model() -> dict[str, torch.nn.Parameter]:
        return {n: torch.nn.Parameter(w.clone()) for n, w in weights.items()}

    shapes = {n: tuple(w.shape) for n, w in weights.items()}
    prev = make_payload(shapes, cfg, torch.float32)
    ahead, applied = model(), model()
    d1 = Distro(ahead.items(), cfg)
    d1.lookahead(0.01, prev, verifiable=True)
    Distro(applied.items(), cfg).apply([prev], 0.01)
    assert all(torch.equal(ahead[n], applied[n]) for n in weights)
    d1.cancel()
    assert all(torch.equal(ahead[n].detach(), weights[n]) for n in weights)
    d1.lookahead(0.01, None, verifiable=True)  # no previous result: no step
    assert all(torch.equal(ahead[n].detach(), weights[n]) for n in weights)
    d1.cancel()
    assert bytes(32) == NO_LOOKAHEAD
