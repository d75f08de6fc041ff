"""The (dp, tp) grid, micro-batch shares, device placement, the TP plan and replica building:
pure logic, no process group is ever started here."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
from transformers import LlamaForCausalLM

from psyche.training import Preset, init_model, llama_config, pick_device
from psyche.training.parallel import (
    ParallelLayout,
    check_tp_compatible,
    device_for_rank,
    llama_tp_plan,
)
from psyche.training.parallel.replica import ModelSpec, build_replica

from .helpers import TINY


@pytest.mark.parametrize(("dp", "tp"), [(1, 1), (2, 1), (1, 2), (2, 2), (3, 2), (2, 4)])
def test_ranks_are_row_major_like_init_device_mesh(dp: int, tp: int) -> None:
    layout = ParallelLayout(dp, tp)
    assert layout.world_size == dp * tp
    assert layout.is_parallel == (dp * tp > 1)
    # init_device_mesh lays ranks out as arange(world).view(mesh_shape).
    mesh = torch.arange(layout.world_size).view(layout.mesh_shape)
    for rank in range(layout.world_size):
        d, t = layout.coords(rank)
        assert int(mesh[d, t]) == rank
        assert layout.rank_of(d, t) == rank
    assert [layout.tp_group(d) for d in range(dp)] == mesh.tolist()
    assert [layout.dp_group(t) for t in range(tp)] == mesh.t().tolist()
    assert layout.coords(0) == (0, 0)  # rank 0 (the client) is replica 0's first shard


@pytest.mark.parametrize("dp", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8])
def test_micro_batches_are_dealt_in_contiguous_runs(dp: int, n: int) -> None:
    layout = ParallelLayout(dp, 2)
    runs = [layout.micro_batch_range(n, d) for d in range(dp)]
    # Concatenated in replica order they are DP=1's micro-batches, each exactly once.
    assert [i for r in runs for i in r] == list(range(n))
    sizes = [len(r) for r in runs]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the extra ones go to the first replicas
    assert len(runs[0]) >= 1 or n == 0  # rank 0's replica has work whenever anyone has


def test_micro_batch_range_examples_and_errors() -> None:
    layout = ParallelLayout(2, 1)
    assert layout.micro_batch_range(5, 0) == range(0, 3)
    assert layout.micro_batch_range(5, 1) == range(3, 5)
    assert layout.micro_batch_range(1, 1) == range(1, 1)  # nothing: contributes a zero gradient
    with pytest.raises(ValueError, match="dp_index 2"):
        layout.micro_batch_range(4, 2)
    with pytest.raises(ValueError, match="n_micro_batches"):
        layout.micro_batch_range(-1, 0)


@pytest.mark.parametrize(
    ("dp", "tp", "what"),
    [(0, 1, "data parallelism"), (1, 0, "tensor parallelism"), (-2, 1, "data"), (1.5, 1, "data")],
)
def test_bad_degrees_are_rejected(dp: object, tp: object, what: str) -> None:
    with pytest.raises(ValueError, match=f"{what}.*integer ≥ 1"):
        ParallelLayout(dp, tp)  # type: ignore[arg-type]


def test_a_bool_is_not_a_degree() -> None:
    with pytest.raises(ValueError, match="integer"):
        ParallelLayout(True, 1)


def test_out_of_grid_positions_are_rejected() -> None:
    layout = ParallelLayout(2, 2)
    with pytest.raises(ValueError, match="rank 4"):
        layout.coords(4)
    with pytest.raises(ValueError, match="outside the 2×2 grid"):
        layout.rank_of(0, 2)


def test_devices_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu, layout = torch.device("cpu"), ParallelLayout(2, 2)
    assert [device_for_rank(cpu, r, layout) for r in range(4)] == [cpu] * 4
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    base = torch.device("cuda", 1)
    two = ParallelLayout(1, 3)
    assert [device_for_rank(base, r, two) for r in range(3)] == [
        torch.device("cuda", i) for i in (1, 2, 3)
    ]
    assert device_for_rank(torch.device("cuda"), 1, layout) == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="needs 4 CUDA devices from cuda:1, but only 4"):
        device_for_rank(base, 0, layout)


def test_mps_takes_no_parallelism(monkeypatch: pytest.MonkeyPatch) -> None:
    mps = torch.device("mps")
    assert device_for_rank(mps, 0, ParallelLayout()) == mps
    for layout in (ParallelLayout(2, 1), ParallelLayout(1, 2)):
        with pytest.raises(ValueError, match="not supported on mps"):
            device_for_rank(mps, 0, layout)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match="MPS is not available"):
        pick_device("mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert pick_device("mps") == mps


def test_tp_degree_must_divide_heads_kv_heads_and_mlp() -> None:
    check_tp_compatible(llama_config(TINY), 1)
    check_tp_compatible(llama_config(TINY), 4)
    with pytest.raises(ValueError, match="tensor parallelism 3 does not divide the model's 4 "):
        check_tp_compatible(llama_config(TINY), 3)
    gqa = Preset(
        hidden_size=64, intermediate_size=128, num_layers=1, num_heads=4, num_kv_heads=2,
        max_seq_len=32,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"2 key/value heads \(num_key_value_heads\)"):
        check_tp_compatible(llama_config(gqa), 4)
    wide = Preset(hidden_size=64, intermediate_size=130, num_layers=1, num_heads=4, max_seq_len=32)
    with pytest.raises(ValueError, match=r"130 MLP width \(intermediate_size\)"):
        check_tp_compatible(llama_config(wide), 4)
    with pytest.raises(ValueError, match="Llama-style config"):
        check_tp_compatible(object(), 2)


def _meta_llama(vocab_size: int = 264, tied: bool = False) -> LlamaForCausalLM:
    config = llama_config(TINY, vocab_size=vocab_size)
    config.tie_word_embeddings = tied
    with torch.device("meta"):
        return LlamaForCausalLM(config)


def test_tp_plan_shards_attention_and_mlp_and_gathers_logits() -> None:
    plan = llama_tp_plan(_meta_llama(), 2)
    for i in range(TINY.num_layers):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
                     "mlp.up_proj"):  # fmt: skip
            assert type(plan[f"model.layers.{i}.{name}"]) is ColwiseParallel
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            assert type(plan[f"model.layers.{i}.{name}"]) is RowwiseParallel
    head = plan["lm_head"]
    assert isinstance(head, ColwiseParallel) and head.output_layouts == (Replicate(),)
    assert len(plan) == 7 * TINY.num_layers + 1  # embeddings and norms stay replicated


def test_lm_head_stays_replicated_when_it_cannot_be_split() -> None:
    assert "lm_head" not in llama_tp_plan(_meta_llama(vocab_size=262), 4)
    assert "lm_head" not in llama_tp_plan(_meta_llama(tied=True), 2)


def test_tp_plan_refuses_other_architectures() -> None:
    model = torch.nn.Linear(4, 4)
    model.config = llama_config(TINY)  # type: ignore[assignment]
    with pytest.raises(ValueError, match="Llama-style models"):
        llama_tp_plan(model, 2)


@pytest.mark.parametrize("tied", [False, True])
def test_a_replica_has_the_canonical_tensors_dtypes_and_ties(tied: bool) -> None:
    config = llama_config(TINY)
    config.tie_word_embeddings = tied
    model = init_model(config, 0)
    with torch.no_grad():  # bf16 weights with fp32 rotary buffers, as a bf16 checkpoint loads
        for p in model.parameters():
            p.data = p.data.to(torch.bfloat16)
    replica = build_replica(ModelSpec.of(model), torch.device("cpu"), None)
    want = {n: (t.shape, t.dtype) for n, t in [*model.named_parameters(), *model.named_buffers()]}
    got = {
        n: (t.shape, t.dtype) for n, t in [*replica.named_parameters(), *replica.named_buffers()]
    }
    assert got == want
    assert {t.dtype for _, t in replica.named_buffers()} == {torch.float32}
    assert isinstance(replica, LlamaForCausalLM)
    assert (replica.lm_head.weight is replica.model.embed_tokens.weight) == tied


def test_a_replica_that_cannot_be_rebuilt_is_refused() -> None:
    model = init_model(llama_config(TINY), 0)
    model.register_buffer("extra", torch.zeros(3))  # not something the config builds
    with pytest.raises(ValueError, match="does not reproduce its tensors; differing: extra"):
        build_replica(ModelSpec.of(model), torch.device("meta"), None)
