"""Optimizer statistics after a real train step of a tiny Llama, checked against norms computed
here independently (from the public ``state_dict`` and a second model's gradients)."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable

import pytest
import torch
from transformers import LlamaForCausalLM

from psyche.distro import Distro
from psyche.metrics import KINDS, optim_stats, param_kind
from psyche.training import init_model, llama_config

from ..training.helpers import TINY, batch_of, distro_cfg, make_trainer

LR = 1e-3


@pytest.fixture
def model() -> LlamaForCausalLM:
    return init_model(llama_config(TINY), seed=0)


def _norm(tensors: Iterable[torch.Tensor]) -> float:
    return float(
        torch.linalg.vector_norm(torch.cat([t.detach().float().flatten() for t in tensors]))
    )


def test_llama_parameters_fall_into_every_kind_but_other(model: LlamaForCausalLM) -> None:
    kinds = {name: param_kind(name) for name, _ in model.named_parameters()}
    assert kinds["model.embed_tokens.weight"] == "embedding"
    assert kinds["lm_head.weight"] == "embedding"
    assert kinds["model.layers.0.self_attn.q_proj.weight"] == "attention"
    assert kinds["model.layers.1.mlp.down_proj.weight"] == "mlp"
    assert kinds["model.layers.0.input_layernorm.weight"] == "norm"
    assert kinds["model.norm.weight"] == "norm"
    assert set(kinds.values()) == {"attention", "mlp", "embedding", "norm"}
    # Other naming schemes: DeepSeek's norm inside attention, GPT-2's blocks.
    assert param_kind("model.layers.0.self_attn.kv_a_layernorm.weight") == "norm"
    assert param_kind("model.layers.3.mlp.experts.7.up_proj.weight") == "mlp"
    assert param_kind("transformer.h.0.ln_1.bias") == "norm"
    assert param_kind("transformer.wte.weight") == "embedding"
    assert param_kind("transformer.h.0.attn.c_attn.weight") == "attention"
    assert param_kind("score.weight") == "other"


def test_stats_after_a_train_step_match_independent_norms(model: LlamaForCausalLM) -> None:
    # The gradient the step will see: at step 0 the residual is zero, so the lookahead moves
    # nothing and the gradient is taken at the initial weights, which a copy reproduces.
    twin = copy.deepcopy(model)
    batch = batch_of(1)
    make_trainer(twin).accumulate_gradients(batch)
    expected_grad = _norm([p.grad for p in twin.parameters() if p.grad is not None])

    trainer = make_trainer(model)
    trainer.train_step(batch, step=0, lr=LR, prev_lr=0.0, prev_self_results=None, zero_optim=True)
    distro = trainer.distro
    assert isinstance(distro, Distro)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    residual = distro.state_dict()["residual"]

    stats = optim_stats(model, distro)

    kinds = ("attention", "mlp", "embedding", "norm")
    assert set(stats) == {
        "weight_norm", "residual_norm", "grad_norm", "nonfinite/weights", "nonfinite/residual",
        *(f"weight_norm/{k}" for k in kinds), *(f"residual_norm/{k}" for k in kinds),
    }  # fmt: skip
    assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values())
    params = dict(model.named_parameters())
    assert stats["weight_norm"] == pytest.approx(_norm(list(params.values())), rel=1e-5)
    assert stats["residual_norm"] == pytest.approx(_norm(list(residual.values())), rel=1e-5)
    for kind in kinds:
        mine = [t for n, t in params.items() if param_kind(n) == kind]
        assert stats[f"weight_norm/{kind}"] == pytest.approx(_norm(mine), rel=1e-5)
        res = [t for n, t in residual.items() if param_kind(n) == kind]
        assert stats[f"residual_norm/{kind}"] == pytest.approx(_norm(res), rel=1e-5)
    # The kinds split the whole: their norms add up in squares to the global one.
    parts = sum(stats[f"weight_norm/{k}"] ** 2 for k in kinds)
    assert math.sqrt(parts) == pytest.approx(stats["weight_norm"], rel=1e-5)
    # The pre-clip norm (the config clips at 1.0, so the clip does not hide it).
    assert stats["grad_norm"] == pytest.approx(expected_grad, rel=1e-4)
    assert stats["grad_norm"] > 0
    # After one step δ = lr·(clipped gradient): its norm is lr·min(norm, clip), up to rounding.
    clipped = min(expected_grad, 1.0)
    assert stats["residual_norm"] == pytest.approx(LR * clipped, rel=1e-3)
    assert stats["nonfinite/weights"] == stats["nonfinite/residual"] == 0.0
    # Only reads.
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(residual[k], v) for k, v in distro.state_dict()["residual"].items())


def test_nonfinite_values_are_counted(model: LlamaForCausalLM) -> None:
    distro = Distro(model.named_parameters(), distro_cfg())
    total = sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        model.model.norm.weight[0] = float("nan")
        model.lm_head.weight[1, 2] = float("inf")
    stats = optim_stats(model, distro)
    assert stats["nonfinite/weights"] == pytest.approx(2 / total)
    assert stats["nonfinite/residual"] == 0.0 and stats["residual_norm"] == 0.0
    assert math.isnan(stats["weight_norm"]) and math.isnan(stats["weight_norm/norm"])
    assert math.isfinite(stats["weight_norm/attention"])
    assert "grad_norm" not in stats  # no generate yet


class NotDistro:
    payload_version = 2


def test_another_optimizer_gets_weight_stats_only(model: LlamaForCausalLM) -> None:
    stats = optim_stats(model, NotDistro())  # type: ignore[arg-type]
    assert set(stats) == {"weight_norm", "nonfinite/weights"} | {
        f"weight_norm/{k}" for k in KINDS if k != "other"
    }
