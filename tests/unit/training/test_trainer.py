"""The train step with real DisTrO: learning, cancellation, determinism across clients, batching."""

from __future__ import annotations

import threading

import pytest
import torch
from transformers import LlamaForCausalLM

from psyche.distro import PAYLOAD_VERSION, Payload, decode_payload
from psyche.protocol.optimizers import DistroOptimizer
from psyche.training import (
    NonFiniteGradient,
    Trainer,
    TrainingCancelled,
    TrainOutput,
    distro_config,
    init_model,
    llama_config,
    model_hash,
)

from .helpers import CPU, TINY, batch_of, distro_cfg, make_trainer

LR = 2e-3


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_train_step_reduces_loss_on_a_repeated_batch(tiny_model: LlamaForCausalLM) -> None:
    trainer = make_trainer(tiny_model)
    batch = batch_of(0)
    before = trainer.evaluate([batch])
    outputs: list[TrainOutput] = []
    # The real pipeline: a round's payloads are applied two rounds later, so step s trains with
    # the results of s−2 applied and those of s−1 still pending (which the lookahead anticipates).
    for step in range(1, 21):
        if step > 2:
            trainer.apply_step([outputs[-2].self_result], lr=LR)
        prev = outputs[-1].self_result if outputs else None
        outputs.append(
            trainer.train_step(
                batch,
                step=step,
                lr=LR,
                prev_lr=LR if step > 1 else 0.0,
                prev_self_results=prev,
                zero_optim=step == 1,
            )
        )
    after = trainer.evaluate([batch])
    assert after < before - 0.5, (before, after)
    assert outputs[0].tokens == batch.numel() and outputs[0].seconds > 0
    assert abs(outputs[0].loss - before) < 1e-4
    assert [o.self_result.trainer_nonce for o in outputs] == list(range(20))


def test_payload_bytes_decode_against_the_model_spec(tiny_model: LlamaForCausalLM) -> None:
    trainer = make_trainer(tiny_model)
    out = trainer.train_step(
        batch_of(1),
        step=5,
        lr=LR,
        prev_lr=LR,
        prev_self_results=None,
        zero_optim=False,
        batch_id=(8, 11),
    )
    decoded = decode_payload(out.payload, trainer.distro.payload_spec)  # type: ignore[attr-defined]
    assert (decoded.step, decoded.batch_start, decoded.batch_end) == (5, 8, 11)
    assert decoded.quantized and out.self_result.quantized
    # v2: a fixed body after a header whose four integers take 4 to 29 bytes.
    spec = trainer.distro.payload_spec  # type: ignore[attr-defined]
    assert out.payload[3] == PAYLOAD_VERSION
    assert spec.max_bytes - 25 <= len(out.payload) <= spec.max_bytes


@pytest.mark.parametrize("cancel_after", [0, 1, 2])
def test_cancel_between_micro_batches_leaves_weights_bit_identical(
    tiny_model: LlamaForCausalLM, cancel_after: int
) -> None:
    trainer = make_trainer(tiny_model, micro_batch_size=1)
    first = trainer.train_step(
        batch_of(2), step=1, lr=LR, prev_lr=0.0, prev_self_results=None, zero_optim=False
    )
    trainer.apply_step([first.self_result], lr=LR)  # a non-zero residual: the lookahead moves
    before = model_hash(tiny_model)
    cancel = threading.Event()
    forwards = 0

    def count_forward(*_: object) -> None:
        nonlocal forwards
        forwards += 1
        if forwards >= cancel_after:
            cancel.set()

    if cancel_after == 0:
        cancel.set()
    handle = tiny_model.register_forward_hook(count_forward)
    try:
        with pytest.raises(TrainingCancelled):
            trainer.train_step(
                batch_of(3),
                step=2,
                lr=LR,
                prev_lr=LR,
                prev_self_results=first.self_result,
                zero_optim=False,
                cancel=cancel,
            )
    finally:
        handle.remove()
    assert model_hash(tiny_model) == before
    assert all(p.grad is None for p in tiny_model.parameters())
    # The trainer is usable again: nothing is left pending.
    trainer.train_step(
        batch_of(3),
        step=2,
        lr=LR,
        prev_lr=LR,
        prev_self_results=first.self_result,
        zero_optim=False,
    )


def test_non_finite_gradient_drops_the_step_and_restores(tiny_model: LlamaForCausalLM) -> None:
    trainer = make_trainer(tiny_model)
    with torch.no_grad():
        tiny_model.model.embed_tokens.weight[10, 0] = float("nan")
    before = model_hash(tiny_model)
    batch = batch_of(4)
    batch[0, 0] = 10
    with pytest.raises(NonFiniteGradient):
        trainer.train_step(
            batch, step=1, lr=LR, prev_lr=LR, prev_self_results=None, zero_optim=True
        )
    assert model_hash(tiny_model) == before


def test_two_clients_stay_bit_identical_through_the_pipeline() -> None:
    """Each client trains its own batch; both apply the same consensus set in the same order."""
    clients = [make_trainer(init_model(llama_config(TINY), seed=5)) for _ in range(2)]
    spec = clients[0].distro.payload_spec  # type: ignore[attr-defined]
    own: list[list[Payload]] = [[], []]
    wire: list[list[bytes]] = []
    for step in range(1, 7):
        for c, trainer in enumerate(clients):
            if step > 2:
                # Consensus order (client 0's batch, then client 1's); own payload kept in memory,
                # the peer's decoded from its wire bytes, as in the daemon.
                payloads = [
                    own[c][-2] if p == c else decode_payload(wire[-2][p], spec) for p in range(2)
                ]
                trainer.apply_step(payloads, lr=LR)
        outs = [
            trainer.train_step(
                batch_of(100 * step + c),
                step=step,
                lr=LR,
                prev_lr=LR,
                prev_self_results=own[c][-1] if own[c] else None,
                zero_optim=step == 1,
            )
            for c, trainer in enumerate(clients)
        ]
        for c, out in enumerate(outs):
            own[c].append(out.self_result)
        wire.append([out.payload for out in outs])
        assert model_hash(clients[0].model) == model_hash(clients[1].model), step
    assert outs[0].payload != outs[1].payload


def test_micro_batching_gives_the_same_gradients(tiny_model: LlamaForCausalLM) -> None:
    batch = batch_of(6)
    grads = []
    for micro in (1, 4):
        trainer = make_trainer(tiny_model, micro_batch_size=micro)
        tiny_model.zero_grad(set_to_none=True)
        trainer.accumulate_gradients(batch)
        grads.append({n: p.grad.clone() for n, p in tiny_model.named_parameters()})  # type: ignore[union-attr]
    for name, g in grads[0].items():
        torch.testing.assert_close(g, grads[1][name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_short_last_micro_batch_weighs_its_samples_as_the_others(
    tiny_model: LlamaForCausalLM,
) -> None:
    """5 samples in micro-batches of 1, 2 (2+2+1) and 4 (4+1) give the batch's mean gradient;
    dividing each micro-batch by their count made the lone fifth sample half of it."""
    batch = batch_of(7, samples=5)
    grads = []
    for micro in (5, 1, 2, 4):
        trainer = make_trainer(tiny_model, micro_batch_size=micro)
        tiny_model.zero_grad(set_to_none=True)
        trainer.accumulate_gradients(batch)
        grads.append({n: p.grad.clone() for n, p in tiny_model.named_parameters()})  # type: ignore[union-attr]
    for other in grads[1:]:
        for name, g in grads[0].items():
            torch.testing.assert_close(other[name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_fp32_accumulation_of_bf16_gradients(tiny_model: LlamaForCausalLM) -> None:
    batch = batch_of(7)
    reference = make_trainer(tiny_model, micro_batch_size=4)
    reference.accumulate_gradients(batch)
    expected = {n: p.grad.clone() for n, p in tiny_model.named_parameters()}  # type: ignore[union-attr]
    model = init_model(llama_config(TINY), seed=0, dtype=torch.bfloat16)  # tiny_model, as bf16
    distro = make_trainer(model).distro
    trainer = Trainer(model, distro, micro_batch_size=1, device=CPU, grad_accum_fp32=True)
    trainer.accumulate_gradients(batch)
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.bfloat16
        cos = torch.nn.functional.cosine_similarity(
            p.grad.float().flatten(), expected[name].flatten(), dim=0
        )
        assert cos > 0.98, name


def test_evaluate_matches_the_training_loss_and_leaves_no_gradients(
    tiny_model: LlamaForCausalLM,
) -> None:
    trainer = make_trainer(tiny_model, micro_batch_size=3)
    batches = [batch_of(8), batch_of(9, samples=2)]
    loss = trainer.evaluate(batches)
    assert all(p.grad is None for p in tiny_model.parameters())
    assert tiny_model.training
    with torch.no_grad():
        direct = sum(float(tiny_model(input_ids=b, labels=b).loss) * b.shape[0] for b in batches)
    direct /= 6
    assert loss == pytest.approx(direct, rel=1e-5)
    with pytest.raises(ValueError, match="at least one"):
        trainer.evaluate([])


def test_bad_batches_and_settings_are_refused(tiny_model: LlamaForCausalLM) -> None:
    trainer = make_trainer(tiny_model)
    with pytest.raises(ValueError, match="seq"):
        trainer.accumulate_gradients(torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="integer"):
        trainer.accumulate_gradients(torch.zeros(2, 8))
    with pytest.raises(ValueError, match="micro_batch_size"):
        Trainer(tiny_model, trainer.distro, micro_batch_size=0, device=CPU)


def test_distro_config_comes_from_the_run_config() -> None:
    run = DistroOptimizer(
        compression_decay=0.999,
        compression_topk=8,
        compression_chunk=64,
        quantize_1bit=True,
        clip_grad_norm=1.0,
        weight_decay=None,
    )
    assert distro_config(run) == distro_cfg()
    assert distro_config(run, residual_fp32=True).residual_fp32
