"""SparseLoCoTrainer (issue 30): a round trains H inner steps and leaves the weights exactly at
the round's start; payloads have the advertised size and are decoded strictly; a cancelled round
changes nothing; the outer apply is identical for two clients given the same payloads; the
run-global state round-trips and a loaded client starts its own state afresh."""

from __future__ import annotations

import threading

import pytest
from transformers import LlamaForCausalLM

from psyche.distro.payload import PayloadError
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training import init_model, llama_config, model_hash
from psyche.training.errors import TrainingCancelled
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

from .helpers import TINY, batch_of


def config(**kw: object) -> SparseLoCoOptimizer:
    base: dict[str, object] = dict(
        betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, clip_grad_norm=1.0, inner_steps=3,
        outer_lr=0.7, outer_momentum=0.5, topk_chunk=64, topk=2, value_bits=2, error_decay=0.95,
    )  # fmt: skip
    return SparseLoCoOptimizer(**{**base, **kw})  # type: ignore[arg-type]


def test_round_restores_the_start_weights_and_sizes_the_payload(
    tiny_model: LlamaForCausalLM,
) -> None:
    t = SparseLoCoTrainer(tiny_model, config(), micro_batch_size=2)
    before = model_hash(tiny_model)
    out = t.train_round(batch_of(1, samples=7), step=1, lr=4e-3)
    assert model_hash(tiny_model) == before
    assert out.inner_steps == 3  # 7 samples in 3 inner batches of 3, 2, 2
    assert len(out.payload) == t.payload_bytes
    decoded = t.decode(out.payload)
    assert decoded is not None
    # Fewer samples than inner steps: one step per sample.
    assert t.train_round(batch_of(2, samples=2), step=2, lr=4e-3).inner_steps == 2


def test_an_inner_step_takes_its_batch_mean_whatever_the_micro_batches(
    tiny_model: LlamaForCausalLM,
) -> None:
    """An inner batch of 3 in micro-batches of 2 (2+1) has the gradient of one micro-batch of
    3: the round above splits 7 samples 3, 2, 2, so an uneven split is the common case."""
    import torch

    batch = batch_of(3, samples=3)
    grads = []
    for micro in (3, 2, 1):
        t = SparseLoCoTrainer(tiny_model, config(clip_grad_norm=None), micro_batch_size=micro)
        t._inner_step(batch, 0.0, None)  # LR 0: the weights stay, the gradient is kept
        grads.append([p.grad.clone() for p in t.params])  # type: ignore[union-attr]
    for other in grads[1:]:
        for g, ref in zip(other, grads[0], strict=True):
            torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-6)


def test_malformed_payloads_are_refused(tiny_model: LlamaForCausalLM) -> None:
    t = SparseLoCoTrainer(tiny_model, config(), micro_batch_size=2)
    data = t.train_round(batch_of(1), step=1, lr=4e-3).payload
    with pytest.raises(PayloadError):
        t.decode(data[:-1])
    with pytest.raises(PayloadError):
        t.decode(b"XYZ" + data[3:])
    before = model_hash(tiny_model)
    with pytest.raises(PayloadError):
        t.apply_round([data, data + b"\0"])
    assert model_hash(tiny_model) == before  # nothing applied when one payload is bad


def test_cancel_changes_nothing(tiny_model: LlamaForCausalLM) -> None:
    t = SparseLoCoTrainer(tiny_model, config(), micro_batch_size=2)
    cancel = threading.Event()
    cancel.set()
    before = model_hash(tiny_model)
    with pytest.raises(TrainingCancelled):
        t.train_round(batch_of(1), step=1, lr=4e-3, cancel=cancel)
    assert model_hash(tiny_model) == before
    assert all(not bool(e.any()) for e in t.state.error)


def test_two_clients_apply_to_the_same_weights_and_a_joiner_gets_the_global_state() -> None:
    a, b = (init_model(llama_config(TINY), seed=0) for _ in range(2))
    ta = SparseLoCoTrainer(a, config(), micro_batch_size=2)
    tb = SparseLoCoTrainer(b, config(), micro_batch_size=2)
    for step in (1, 2):
        pa = ta.train_round(batch_of(10 + step), step=step, lr=4e-3).payload
        pb = tb.train_round(batch_of(20 + step), step=step, lr=4e-3).payload
        ta.apply_round([pa, pb])
        tb.apply_round([pa, pb])
        assert model_hash(a) == model_hash(b)
    # A joiner: the weights and the global state (outer momentum) from a peer, its own state zero.
    c = init_model(llama_config(TINY), seed=0)
    c.load_state_dict(a.state_dict())
    tc = SparseLoCoTrainer(c, config(), micro_batch_size=2)
    tc.load_state_dict(ta.state_dict())
    assert all(not bool(e.any()) for e in tc.state.error)
    pa = ta.train_round(batch_of(31), step=3, lr=4e-3).payload
    pb = tb.train_round(batch_of(32), step=3, lr=4e-3).payload
    for t in (ta, tb, tc):
        t.apply_round([pa, pb])
    assert model_hash(a) == model_hash(b) == model_hash(c)
    with pytest.raises(ValueError):
        tc.load_state_dict({})  # the momentum is required when the run has one


def test_no_momentum_no_global_state(tiny_model: LlamaForCausalLM) -> None:
    t = SparseLoCoTrainer(tiny_model, config(outer_momentum=0.0), micro_batch_size=2)
    assert t.state_dict() == {}
    before = model_hash(tiny_model)
    t.apply_round([])
    assert model_hash(tiny_model) == before


def test_the_round_engine_interface_trains_applies_and_sits_out(
    tiny_model: LlamaForCausalLM,
) -> None:
    """What the daemon calls: ``train_step`` (DisTrO's signature; no self-result), ``sit_out``
    (nothing moves), ``apply_step`` on decoded payloads (the outer step) and ``evaluate``."""
    t = SparseLoCoTrainer(tiny_model, config(), micro_batch_size=2)
    before = model_hash(tiny_model)
    out = t.train_step(
        batch_of(2, samples=6), step=1, lr=4e-3, prev_lr=0.0, prev_self_results=None,
        zero_optim=True, batch_id=(0, 5),
    )  # fmt: skip
    assert out.self_result is None and len(out.payload) == t.format.max_bytes
    t.sit_out(lr=4e-3)
    assert model_hash(tiny_model) == before
    loss_before = t.evaluate([batch_of(9)])
    t.apply_step([t.format.decode(out.payload)], lr=4e-3)
    assert model_hash(tiny_model) != before
    assert t.evaluate([batch_of(9)]) != loss_before


def test_the_state_file_round_trips_and_garbage_is_refused() -> None:
    a = SparseLoCoTrainer(init_model(llama_config(TINY), seed=3), config(), micro_batch_size=2)
    b = SparseLoCoTrainer(init_model(llama_config(TINY), seed=3), config(), micro_batch_size=2)
    out = a.train_round(batch_of(4, samples=3), step=1, lr=4e-3)
    a.apply_round([out.payload])  # the momentum is no longer zero
    data = a.state_file()
    assert data is not None
    b.load_state_file(data)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(bool((sa[k] == sb[k]).all()) for k in sa)
    with pytest.raises(ValueError, match="not a safetensors file"):
        b.load_state_file(b"not a safetensors file")
    plain = SparseLoCoTrainer(
        init_model(llama_config(TINY), seed=3), config(outer_momentum=0.0), micro_batch_size=2
    )
    assert plain.state_file() is None  # no global state to carry
    with pytest.raises(ValueError, match="expected"):
        plain.load_state_file(data)  # another run's state: keys that this run has not
