"""The Distro optimizer on a tiny model: determinism, apply math, lookahead/cancel, decay, state."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from psyche.distro import (
    Distro,
    DistroConfig,
    Payload,
    PayloadError,
    clip_grad_norm_,
    decode,
    decode_payload,
    encode_payload,
)
from psyche.distro.compress import aggregate


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 16)
        self.proj = nn.Linear(16, 8)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(tokens))


def tiny(seed: int = 0, dtype: torch.dtype = torch.float32) -> Tiny:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Tiny().to(dtype)


def cfg(**overrides: object) -> DistroConfig:
    values: dict[str, object] = {
        "compression_decay": 0.9,
        "compression_topk": 3,
        "compression_chunk": 4,
        "quantize_1bit": False,
    }
    values.update(overrides)
    return DistroConfig(**values)  # type: ignore[arg-type]


def backward(model: Tiny, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 10, (6,), generator=generator)
    targets = torch.randint(0, 8, (6,), generator=generator)
    logits = model(tokens).float()
    nn.functional.cross_entropy(logits, targets).backward()


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def train(seed: int, config: DistroConfig, dtype: torch.dtype, rounds: int = 3) -> tuple:
    model = tiny(seed, dtype)
    distro = Distro(model.named_parameters(), config)
    sent: list[bytes] = []
    prev_self: Payload | None = None
    prev_lr = 0.0
    for step in range(rounds):
        lr = 0.01 * (step + 1)
        distro.lookahead(prev_lr)
        backward(model, seed * 100 + step)
        prev_self = distro.generate(
            lr, prev_lr, prev_self, step=step, batch_start=step * 4, batch_end=step * 4 + 3
        )
        data = encode_payload(prev_self)
        sent.append(data)
        distro.apply([decode_payload(data, distro.payload_spec)], lr)
        prev_lr = lr
    return sent, snapshot(model), distro.state_dict()["residual"]


@pytest.mark.parametrize("quantize", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_two_runs_are_bit_identical(quantize: bool, dtype: torch.dtype) -> None:
    config = cfg(quantize_1bit=quantize, weight_decay=0.1, clip_grad_norm=0.5)
    first, second = train(1, config, dtype), train(1, config, dtype)
    assert first[0] == second[0]
    assert same(first[1], second[1])
    assert same(first[2], second[2])
    assert train(2, config, dtype)[0] != first[0]


def test_parameters_are_ordered_by_name() -> None:
    distro = Distro(tiny().named_parameters(), cfg())
    assert distro.names == ("embed.weight", "proj.bias", "proj.weight")
    assert [t.name for t in distro.payload_spec.tensors] == list(distro.names)


@pytest.mark.parametrize("quantize", [False, True])
def test_apply_three_clients_equals_manual_scatter_mean(quantize: bool) -> None:
    config = cfg(quantize_1bit=quantize, compression_topk=5)
    models = [tiny(0) for _ in range(3)]
    clients = [Distro(m.named_parameters(), config) for m in models]
    payloads = []
    for n, (model, client) in enumerate(zip(models, clients, strict=True)):
        backward(model, n)
        data = encode_payload(client.generate(0.1, 0.0, None))
        payloads.append(decode_payload(data, client.payload_spec))
    before = snapshot(models[0])
    lr = 0.05
    for client in clients:
        client.apply(payloads, lr)
    for name, spec_index in zip(clients[0].names, range(3), strict=True):
        results = [p.results[spec_index] for p in payloads]
        idx = torch.cat([r.idx for r in results], -1)
        val = torch.cat([r.val.float() for r in results], -1)
        if quantize:
            assert set(val.unique().tolist()) <= {-1.0, 1.0}
        zeros = torch.zeros(*idx.shape[:-1], results[0].totalk)
        mean = zeros.scatter_reduce(-1, idx, val, "mean", include_self=False)
        grad = torch.sign(decode(mean.reshape(results[0].xshape))).reshape(before[name].shape)
        expected = before[name] - lr * grad
        assert torch.equal(dict(models[0].named_parameters())[name].detach(), expected)
    assert same(snapshot(models[0]), snapshot(models[1]))
    assert same(snapshot(models[0]), snapshot(models[2]))


def test_own_unquantized_payload_applies_like_its_decoded_form() -> None:
    config = cfg(quantize_1bit=True)
    a, b = tiny(0), tiny(0)
    da, db = Distro(a.named_parameters(), config), Distro(b.named_parameters(), config)
    backward(a, 1)
    backward(b, 1)
    own, twin = da.generate(0.1, 0.0), db.generate(0.1, 0.0)
    da.apply([own], 0.1)
    db.apply([decode_payload(encode_payload(twin), db.payload_spec)], 0.1)
    assert same(snapshot(a), snapshot(b))


def prime(model: Tiny, distro: Distro) -> Payload:
    """One round so that the residual is non-zero."""
    backward(model, 5)
    return distro.generate(0.1, 0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lookahead_then_cancel_restores_parameters_bit_exact(dtype: torch.dtype) -> None:
    model = tiny(0, dtype)
    distro = Distro(model.named_parameters(), cfg())
    prime(model, distro)
    before = snapshot(model)
    distro.lookahead(0.0123)
    assert distro.lookahead_pending
    assert not same(before, snapshot(model))
    backward(model, 6)
    distro.cancel()
    assert not distro.lookahead_pending
    assert same(before, snapshot(model))
    assert all(p.grad is None for p in model.parameters())


def test_exact_undo_where_reference_arithmetic_drifts_in_bf16() -> None:
    model = tiny(0, torch.bfloat16)
    distro = Distro(model.named_parameters(), cfg())
    prime(model, distro)
    before = snapshot(model)
    lr = 0.0123
    distro.lookahead(lr)
    residual = distro.state_dict()["residual"]
    # The reference undoes the lookahead by adding the step back, which rounds differently.
    naive = {n: p.detach() + lr * torch.sign(residual[n]) for n, p in model.named_parameters()}
    assert not same(naive, before)
    backward(model, 6)
    distro.generate(lr, lr)
    assert same(before, snapshot(model))


def test_cancel_with_lr_matches_clients_that_finished() -> None:
    config = cfg(weight_decay=0.3)
    done, cut = tiny(0, torch.bfloat16), tiny(0, torch.bfloat16)
    d_done, d_cut = Distro(done.named_parameters(), config), Distro(cut.named_parameters(), config)
    prime(done, d_done)
    prime(cut, d_cut)
    for distro in (d_done, d_cut):
        distro.lookahead(0.1)
    backward(done, 7)
    d_done.generate(0.05, 0.1)
    d_cut.cancel(0.05)
    assert same(snapshot(done), snapshot(cut))


def test_weight_decay_is_decoupled_and_applied_in_generate() -> None:
    model = tiny(0)
    distro = Distro(model.named_parameters(), cfg(weight_decay=0.5))
    before = snapshot(model)
    payload = distro.generate(0.2, 0.0)  # no gradients at all
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), before[name].mul(1.0 - 0.2 * 0.5))
    assert all(bool((r.val == 0).all()) for r in payload.results)


def test_generate_residual_math() -> None:
    config = cfg(residual_fp32=True, compression_decay=0.75)
    model = tiny(0)
    distro = Distro(model.named_parameters(), config)
    backward(model, 1)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    first = distro.generate(0.1, 0.0)
    residual = distro.state_dict()["residual"]
    for name in distro.names:
        assert torch.equal(residual[name], grads[name] * 0.1)
    backward(model, 2)
    grads2 = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    distro.generate(0.2, 0.1, first)
    after = distro.state_dict()["residual"]
    for n, name in enumerate(distro.names):
        sent = decode(aggregate([first.results[n]])).reshape(residual[name].shape)
        expected = (residual[name] - sent) * 0.75 + 0.2 * grads2[name]
        assert torch.allclose(after[name], expected, rtol=1e-6, atol=1e-7)


def test_residual_fp32_keeps_the_wire_compact() -> None:
    model = tiny(0, torch.bfloat16)
    wide = Distro(model.named_parameters(), cfg(residual_fp32=True))
    narrow = Distro(tiny(0, torch.bfloat16).named_parameters(), cfg())
    assert all(d.dtype == torch.float32 for d in wide.state_dict()["residual"].values())
    assert all(d.dtype == torch.bfloat16 for d in narrow.state_dict()["residual"].values())
    assert wide.payload_spec == narrow.payload_spec
    payload = prime(model, wide)
    assert all(r.val.dtype == torch.bfloat16 for r in payload.results)
    data = encode_payload(payload)
    assert len(data) <= wide.payload_spec.max_bytes
    decode_payload(data, wide.payload_spec)  # the layout digest covers the bf16 value code


def test_clip_grad_norm() -> None:
    model = tiny(0)
    backward(model, 3)
    params = list(model.parameters())
    grads = [p.grad.clone() for p in params if p.grad is not None]
    assert len(grads) == len(params)
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()
    assert clip_grad_norm_(model.parameters(), None) == pytest.approx(norm, rel=1e-6)
    assert clip_grad_norm_(model.parameters(), norm * 2) == pytest.approx(norm, rel=1e-6)
    assert all(
        torch.equal(g, p.grad) for g, p in zip(grads, params, strict=True) if p.grad is not None
    )
    clip_grad_norm_(model.parameters(), norm / 4)
    assert clip_grad_norm_(model.parameters(), 0) == pytest.approx(norm / 4, rel=1e-5)
    for g, p in zip(grads, params, strict=True):
        assert p.grad is not None
        assert torch.equal(p.grad, g.mul(norm / 4 / (norm + 1e-6)))


def test_non_finite_gradient_changes_nothing_and_cancel_recovers() -> None:
    model = tiny(0)
    distro = Distro(model.named_parameters(), cfg())
    prime(model, distro)
    before, residual = snapshot(model), distro.state_dict()["residual"]
    distro.lookahead(0.1)
    backward(model, 4)
    model.proj.bias.grad[0] = math.nan  # type: ignore[index]
    with pytest.raises(FloatingPointError):
        distro.generate(0.1, 0.1)
    assert same(residual, distro.state_dict()["residual"])
    distro.cancel()
    assert same(before, snapshot(model))


def test_misuse_is_refused() -> None:
    model = tiny(0)
    distro = Distro(model.named_parameters(), cfg())
    payload = prime(model, distro)
    distro.lookahead(0.1)
    with pytest.raises(RuntimeError):
        distro.lookahead(0.1)
    with pytest.raises(RuntimeError):
        distro.apply([payload], 0.1)
    with pytest.raises(ValueError, match="prev_lr"):
        distro.generate(0.1, 0.2)
    distro.cancel()
    quantized = Payload(0, 0, 0, 0, True, payload.results)
    with pytest.raises(PayloadError, match="quantized"):
        distro.apply([quantized], 0.1)
    other = Distro(nn.Linear(16, 8).named_parameters(), cfg())
    backward_other = other.generate(0.1, 0.0)
    with pytest.raises(PayloadError):
        distro.apply([payload, backward_other], 0.1)
    with pytest.raises(ValueError):
        Distro([("w", torch.zeros(3, dtype=torch.int64))], cfg())


def test_apply_nothing_is_a_no_op() -> None:
    model = tiny(0)
    distro = Distro(model.named_parameters(), cfg())
    before = snapshot(model)
    distro.apply([], 0.1)
    assert same(before, snapshot(model))


def test_zero_residual_and_state_dict_round_trip() -> None:
    model = tiny(0)
    distro = Distro(model.named_parameters(), cfg())
    prime(model, distro)
    state = distro.state_dict()
    assert set(state) == {"format", "residual"}
    assert any(bool(d.any()) for d in state["residual"].values())
    fresh = Distro(tiny(1).named_parameters(), cfg())
    fresh.load_state_dict(state)
    assert same(fresh.state_dict()["residual"], state["residual"])
    distro.zero_residual()
    assert not any(bool(d.any()) for d in distro.state_dict()["residual"].values())
    before = snapshot(model)
    distro.lookahead(0.5)
    assert same(before, snapshot(model))  # sign(0) = 0
    distro.cancel()
    with pytest.raises(ValueError, match="keys"):
        fresh.load_state_dict({"residual": state["residual"]})
    bad = {"format": 1, "residual": {**state["residual"], "proj.bias": torch.zeros(3)}}
    with pytest.raises(ValueError, match="shape"):
        fresh.load_state_dict(bad)
    with pytest.raises(ValueError, match="missing"):
        fresh.load_state_dict({"format": 1, "residual": {}})


@pytest.mark.parametrize(
    "overrides",
    [
        {"compression_decay": 1.5},
        {"compression_decay": math.nan},
        {"compression_topk": 0},
        {"compression_chunk": 70_000},
        {"weight_decay": -1.0},
        {"clip_grad_norm": math.inf},
    ],
)
def test_config_validation(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        cfg(**overrides)
