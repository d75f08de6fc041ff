"""Run-config rules, LR schedules, the batch-size ramp and loading reference-style TOML files."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import pytest

from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.locations import (
    DontShuffle,
    EphemeralCheckpoint,
    GcsCheckpoint,
    GcsRepo,
    HttpData,
    HubCheckpoint,
    HubRepo,
    LocalData,
    P2PCheckpoint,
    P2PGcsCheckpoint,
    PreprocessedData,
    SeededShuffle,
    ServerData,
    SingleUrl,
    TokenSize,
    WeightedHttpData,
)
from psyche.protocol.lr_schedules import ConstantLR, CosineLR, LinearLR, WarmupStableDecayLR
from psyche.protocol.model import LLM, LLMArchitecture, LLMDataType
from psyche.protocol.optimizers import DistroOptimizer, DummyOptimizer
from psyche.protocol.run_file import (
    RunConfig,
    load_run_config,
    parse_toml,
    run_config_from_obj,
)
from psyche.protocol.strict_obj import ConfigError
from support.configs import four_client_config

from .support import make_model

ROOT = Path(__file__).resolve().parents[3]

# --- CoordinatorConfig.check --------------------------------------------------------------------

BASE = dict(
    warmup_time=60,
    cooldown_time=30,
    max_round_train_time=30,
    round_witness_time=5,
    global_batch_size_warmup_tokens=0,
    epoch_time=600,
    total_steps=1000,
    init_min_clients=3,
    min_clients=2,
    witness_nodes=2,
    global_batch_size_start=8,
    global_batch_size_end=16,
    verification_percent=0,
    waiting_for_members_extra_time=3,
)

CONFIG_RULES = [
    ({"epoch_time": 0, "warmup_time": 0}, "config.epoch_time must be greater than 0"),
    ({"epoch_time": 60}, "config.warmup_time (60) must be less than config.epoch_time (60)"),
    ({"warmup_time": 61, "epoch_time": 60}, "config.warmup_time (61) must be less than "
     "config.epoch_time (60)"),
    ({"max_round_train_time": 0}, "config.max_round_train_time must be greater than 0"),
    ({"max_round_train_time": 600}, "config.max_round_train_time (600) must be less than "
     "config.epoch_time (600)"),
    ({"round_witness_time": 0}, "config.round_witness_time must be greater than 0"),
    ({"min_clients": 0, "witness_nodes": 0}, "config.min_clients must be greater than 0"),
    ({"init_min_clients": 1}, "config.init_min_clients (1) must be at least "
     "config.min_clients (2)"),
    ({"init_min_clients": 257}, "config.init_min_clients (257) must be at most 256"),
    ({"global_batch_size_start": 0}, "config.global_batch_size_start must be greater than 0"),
    ({"global_batch_size_end": 0}, "config.global_batch_size_end must be greater than 0"),
    ({"global_batch_size_end": 7}, "config.global_batch_size_end (7) must be at least "
     "config.global_batch_size_start (8)"),
    ({"total_steps": 0}, "config.total_steps must be greater than 0"),
    ({"witness_nodes": 3}, "config.witness_nodes (3) must be at most config.min_clients (2)"),
    ({"witness_nodes": 33, "min_clients": 40, "init_min_clients": 40},
     "config.witness_nodes (33) must be at most 32"),
    ({"cooldown_time": 0}, "config.cooldown_time must be greater than 0"),
    ({"waiting_for_members_extra_time": 0},
     "config.waiting_for_members_extra_time must be greater than 0"),
    ({"verification_percent": 101}, "config.verification_percent (101) must be at most 100"),
]  # fmt: skip


def cfg(**changes: int) -> CoordinatorConfig:
    return CoordinatorConfig(**{**BASE, **changes})


def test_base_config_is_valid() -> None:
    cfg().check()
    cfg(verification_percent=25).check()
    cfg(verification_percent=100).check()
    cfg(witness_nodes=0, min_clients=1, init_min_clients=256).check()
    cfg(witness_nodes=32, min_clients=32, init_min_clients=32).check()


@pytest.mark.parametrize(("changes", "message"), CONFIG_RULES)
def test_config_rule_message(changes: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        cfg(**changes).check()
    assert str(e.value) == message


def test_config_rules_checked_in_order() -> None:
    """Several broken rules: the first in the reference's order is reported."""
    with pytest.raises(ConfigError, match=r"^config.epoch_time must be greater than 0$"):
        cfg(epoch_time=0, total_steps=0, cooldown_time=0).check()
    with pytest.raises(ConfigError, match=r"^config.total_steps"):
        cfg(total_steps=0, cooldown_time=0, verification_percent=101).check()


# --- LLM.check ----------------------------------------------------------------------------------


def llm(**changes: object) -> LLM:
    return dataclasses.replace(make_model(), **changes)  # type: ignore[arg-type]


DISTRO = DistroOptimizer(compression_decay=0.9, compression_topk=8, compression_chunk=64,
                         quantize_1bit=False)  # fmt: skip

MODEL_RULES = [
    ({"max_seq_len": 0}, "model.LLM.max_seq_len must be greater than 0"),
    ({"data_location": ServerData("")}, "model.LLM.data_location.Server must not be empty"),
    ({"data_location": LocalData("")}, "model.LLM.data_location.Local must not be empty"),
    ({"data_location": PreprocessedData("")},
     "model.LLM.data_location.Preprocessed must not be empty"),
    ({"data_location": WeightedHttpData("")},
     "model.LLM.data_location.WeightedHttp must not be empty"),
    ({"data_location": HttpData(location=SingleUrl(""), token_size_in_bytes=TokenSize.TwoBytes,
                                shuffle=SeededShuffle(tuple(range(32))))},
     "model.LLM.data_location.Http.location must not be empty"),
    ({"checkpoint": EphemeralCheckpoint()},
     "model.LLM.checkpoint must not be Ephemeral (clients need a model to start from)"),
    ({"checkpoint": HubCheckpoint(HubRepo(repo_id=""))},
     "model.LLM.checkpoint.Hub.repo_id must not be empty"),
    ({"checkpoint": P2PCheckpoint(HubRepo(repo_id=""))},
     "model.LLM.checkpoint.P2P.repo_id must not be empty"),
    ({"checkpoint": GcsCheckpoint(GcsRepo(bucket=""))},
     "model.LLM.checkpoint.Gcs.bucket must not be empty"),
    ({"checkpoint": P2PGcsCheckpoint(GcsRepo(bucket="", prefix="p"))},
     "model.LLM.checkpoint.P2PGcs.bucket must not be empty"),
    ({"optimizer": DummyOptimizer()}, "model.LLM.optimizer must not be Dummy"),
    ({"optimizer": dataclasses.replace(DISTRO, compression_chunk=0)},
     "model.LLM.optimizer.Distro.compression_chunk must be > 0"),
    ({"optimizer": dataclasses.replace(DISTRO, compression_topk=0)},
     "model.LLM.optimizer.Distro.compression_topk must be > 0"),
    ({"lr_schedule": WarmupStableDecayLR(
        base_lr=1.0, warmup_init_lr=0.0, cosine_decay_final_lr=0.1, linear_decay_final_lr=0.2,
        warmup_steps=1, stable_steps=1, cosine_decay_steps=1, linear_decay_steps=1)},
     "model.LLM.lr_schedule.WarmupStableDecay: need linear_decay_final_lr <= "
     "cosine_decay_final_lr <= base_lr"),
]  # fmt: skip


def test_base_model_is_valid() -> None:
    make_model().check()
    llm(data_location=ServerData("host:1"), checkpoint=GcsCheckpoint(GcsRepo(bucket="b"))).check()


@pytest.mark.parametrize(("changes", "message"), MODEL_RULES)
def test_model_rule_message(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        llm(**changes).check()
    assert str(e.value) == message


def test_cold_start_warmup_steps_limit() -> None:
    config = cfg(epoch_time=100, warmup_time=20, max_round_train_time=10)
    llm(cold_start_warmup_steps=8).check_cold_start_warmup_steps(config)
    with pytest.raises(ConfigError) as e:
        llm(cold_start_warmup_steps=9).check_cold_start_warmup_steps(config)
    assert str(e.value) == (
        "model.LLM.cold_start_warmup_steps (9) must be at most "
        "(config.epoch_time - config.warmup_time) / config.max_round_train_time (8)"
    )


def test_run_config_check_run_id() -> None:
    rc = RunConfig(run_id="", config=four_client_config(), model=make_model())
    with pytest.raises(ConfigError, match=r"^run_id must not be empty$"):
        rc.check()
    rc = RunConfig(run_id="x" * 33, config=four_client_config(), model=make_model())
    with pytest.raises(ConfigError, match=r"^run_id \('x{33}'\) must be at most 32 bytes$"):
        rc.check()
    RunConfig(run_id="x" * 32, config=four_client_config(), model=make_model()).check()


# --- LR schedules -------------------------------------------------------------------------------


def test_constant_lr() -> None:
    s = ConstantLR(base_lr=1.0, warmup_steps=10, warmup_init_lr=0.0)
    assert [s.get_lr(x) for x in (0, 5, 9, 10, 1000)] == [0.0, 0.5, 0.9, 1.0, 1.0]
    assert ConstantLR(base_lr=2.0, warmup_steps=0, warmup_init_lr=0.0).get_lr(0) == 2.0


def test_linear_lr() -> None:
    s = LinearLR(base_lr=1.0, warmup_steps=10, warmup_init_lr=0.0, total_steps=110, final_lr=0.0)
    assert s.get_lr(5) == 0.5
    assert s.get_lr(10) == 1.0
    assert s.get_lr(60) == pytest.approx(0.5)
    assert s.get_lr(110) == 0.0 and s.get_lr(10_000) == 0.0


def test_cosine_lr_and_clamp() -> None:
    s = CosineLR(base_lr=1.0, warmup_steps=10, warmup_init_lr=0.0, total_steps=110, final_lr=0.1)
    assert s.get_lr(0) == 0.0 and s.get_lr(5) == 0.5
    assert s.get_lr(10) == pytest.approx(1.0)
    assert s.get_lr(60) == pytest.approx(0.55)
    assert s.get_lr(110) == pytest.approx(0.1)
    # Past total_steps the reference's unclamped formula rose again (p = 2 gives base_lr at
    # step 210); ours stays at final_lr (docs/protocol.md, "Known flaws of the reference", flaw 16).
    p = (210 - 10) / 100
    assert 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)) == pytest.approx(1.0)
    for step in (111, 150, 210, 10**6):
        assert s.get_lr(step) == 0.1
    lrs = [s.get_lr(x) for x in range(10, 300)]
    assert all(a >= b for a, b in itertools.pairwise(lrs))
    degenerate = CosineLR(base_lr=1.0, warmup_steps=10, warmup_init_lr=0.0, total_steps=5,
                          final_lr=0.2)  # fmt: skip
    assert degenerate.get_lr(10) == 0.2 and degenerate.get_lr(4) == 0.4


def test_warmup_stable_decay_phases() -> None:
    s = WarmupStableDecayLR(
        base_lr=1.0,
        warmup_init_lr=0.0,
        cosine_decay_final_lr=0.5,
        linear_decay_final_lr=0.1,
        warmup_steps=10,
        stable_steps=20,
        cosine_decay_steps=40,
        linear_decay_steps=30,
    )
    s.check()
    assert s.get_lr(5) == 0.5  # warmup
    assert s.get_lr(10) == 1.0 and s.get_lr(29) == 1.0  # stable
    assert s.get_lr(30) == pytest.approx(1.0)  # cosine starts at base
    assert s.get_lr(50) == pytest.approx(0.75)  # half way: 0.5 + 0.5·0.5·(1 + cos(π/2))
    assert s.get_lr(70) == pytest.approx(0.5)  # linear starts at cosine_decay_final_lr
    assert s.get_lr(85) == pytest.approx(0.3)
    assert s.get_lr(100) == pytest.approx(0.1) and s.get_lr(10**6) == 0.1
    lrs = [s.get_lr(x) for x in range(10, 200)]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(lrs))


# --- batch-size ramp ----------------------------------------------------------------------------


def test_batch_size_ramp_rounding() -> None:
    c = four_client_config(global_batch_size_start=1, global_batch_size_end=5,
                    global_batch_size_warmup_tokens=8)  # fmt: skip
    # 1 + 4·t/8 = 1 + t/2: halves round away from zero (2.5 → 3, 3.5 → 4, 4.5 → 5).
    assert [c.get_batch_size(t) for t in range(10)] == [1, 2, 2, 3, 3, 4, 4, 5, 5, 5]
    assert c.get_batch_size(10**12) == 5


def test_batch_size_without_ramp() -> None:
    c = four_client_config(global_batch_size_start=3, global_batch_size_end=9)
    assert {c.get_batch_size(t) for t in (0, 1, 10**9)} == {9}


def test_batch_size_ramp_is_monotone_and_bounded() -> None:
    c = four_client_config(global_batch_size_start=7, global_batch_size_end=1000,
                    global_batch_size_warmup_tokens=12_345)  # fmt: skip
    sizes = [c.get_batch_size(t) for t in range(0, 13_000, 7)]
    assert sizes[0] == 7 and sizes[-1] == 1000
    assert all(a <= b for a, b in itertools.pairwise(sizes))


# --- loading reference-style TOML ---------------------------------------------------------------

REFERENCE_STATE = """\
run_id = "llama2-20m-test"
run_state = "WaitingForMembers"

[config]
warmup_time = 30
cooldown_time = 30
epoch_time = 900
max_round_train_time = 15
round_witness_time = 1
min_clients = 1
init_min_clients = 1
verification_percent = 0
witness_nodes = 1
global_batch_size_start = 256
global_batch_size_end = 256
global_batch_size_warmup_tokens = 0
total_steps = 25000

[model.LLM]
architecture = "HfLlama"
data_type = "Pretraining"
max_seq_len = 2048
cold_start_warmup_steps = 0

[model.LLM.checkpoint.Hub]
repo_id = "emozilla/llama2-20m-init"
revision = "main"

[model.LLM.data_location]
Server = "127.0.0.1:20001"

[model.LLM.lr_schedule.Cosine]
base_lr = 4.0e-4
warmup_steps = 250
warmup_init_lr = 0.0
total_steps = 25000
final_lr = 4.0e-5

[model.LLM.optimizer.Distro]
clip_grad_norm = 1.0
compression_decay = 0.999
compression_chunk = 64
compression_topk = 8
quantize_1bit = true
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "state.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_reference_state_toml(tmp_path: Path) -> None:
    rc = load_run_config(write(tmp_path, REFERENCE_STATE), require_run_id=True)
    assert rc.run_id == "llama2-20m-test" and rc.run_state == "WaitingForMembers"
    assert rc.warnings == ()
    assert rc.config.total_steps == 25000 and rc.config.waiting_for_members_extra_time == 3
    m = rc.model
    assert isinstance(m, LLM)
    assert m.architecture is LLMArchitecture.HfLlama and m.data_type is LLMDataType.Pretraining
    assert m.checkpoint == HubCheckpoint(
        HubRepo(repo_id="emozilla/llama2-20m-init", revision="main")
    )
    assert m.data_location == ServerData("127.0.0.1:20001")
    assert m.lr_schedule == CosineLR(base_lr=4e-4, warmup_steps=250, warmup_init_lr=0.0,
                                     total_steps=25000, final_lr=4e-5)  # fmt: skip
    assert isinstance(m.optimizer, DistroOptimizer) and m.optimizer.quantize_1bit
    assert m.optimizer.weight_decay is None and m.optimizer.clip_grad_norm == 1.0


def test_reference_state_toml_with_http_data_and_tables(tmp_path: Path) -> None:
    text = REFERENCE_STATE.replace(
        '[model.LLM.data_location]\nServer = "127.0.0.1:20001"\n',
        '[model.LLM.data_location.Http]\ntoken_size_in_bytes = "TwoBytes"\n'
        'shuffle = "DontShuffle"\n'
        'location = { SingleUrl = "https://example.com/tokens.bin" }\n',
    )
    text += "\n[progress]\nepoch = 0\nstep = 1\nepoch_start_data_index = 0\n"
    rc = load_run_config(write(tmp_path, text), require_run_id=True)
    loc = rc.model.data_location  # type: ignore[attr-defined]
    assert loc == HttpData(
        location=SingleUrl("https://example.com/tokens.bin"),
        token_size_in_bytes=TokenSize.TwoBytes,
        shuffle=DontShuffle(),
    )
    assert rc.extra == {"progress": {"epoch": 0, "step": 1, "epoch_start_data_index": 0}}


NEWER_REFERENCE_STATE = """\
run_id = "newer-layout"
run_state = "WaitingForMembers"

[config]
warmup_time = 30
cooldown_time = 30
epoch_time = 900
max_round_train_time = 15
round_witness_time = 1
round_apply_time = 15
min_clients = 2
init_min_clients = 2
witness_nodes = 2
global_batch_size_start = 64
global_batch_size_end = 256
global_batch_size_warmup_tokens = 1000000
total_steps = 1000
waiting_for_members_extra_time = 3

[model.LLM]
architecture = "HfAuto"
data_type = "Pretraining"
max_seq_len = 1024
cold_start_warmup_steps = 10

[model.LLM.checkpoint.Hub]
repo_id = "org/model"

[model_extra_data]
checkpoint_source = "Hub"

[model_extra_data.data_location]
Server = "10.0.0.1:20001"

[model_extra_data.lr_schedule.Constant]
base_lr = 1.0e-4
warmup_steps = 10
warmup_init_lr = 0.0

[model_extra_data.optimizer.Distro]
compression_decay = 0.999
compression_chunk = 64
compression_topk = 8
quantize_1bit = false
"""


def test_newer_reference_layout_loads_with_warnings(tmp_path: Path) -> None:
    rc = load_run_config(write(tmp_path, NEWER_REFERENCE_STATE), require_run_id=True)
    assert rc.warnings == (
        "merged [model_extra_data] into [model.LLM]",
        "config.round_apply_time is not part of this protocol and was ignored",
        "model.LLM.checkpoint_source is not part of this protocol and was ignored",
    )
    m = rc.model
    assert isinstance(m, LLM)
    assert m.data_location == ServerData("10.0.0.1:20001")
    assert m.lr_schedule == ConstantLR(base_lr=1e-4, warmup_steps=10, warmup_init_lr=0.0)
    assert m.architecture is LLMArchitecture.HfAuto and m.cold_start_warmup_steps == 10
    assert rc.config.global_batch_size_warmup_tokens == 1_000_000


def test_checkpoint_source_in_model_llm_is_dropped() -> None:
    text = REFERENCE_STATE.replace(
        "cold_start_warmup_steps = 0\n", 'cold_start_warmup_steps = 0\ncheckpoint_source = "Hub"\n'
    )
    rc = run_config_from_obj(parse_toml(text))
    rc.check()
    assert rc.warnings == (
        "model.LLM.checkpoint_source is not part of this protocol and was ignored",
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("[config]\n", "[config]\nfoo = 1\n"), "config.foo: unknown key"),
        (("[model.LLM]\n", "[model.LLM]\nbar = 1\n"), "model.LLM.bar: unknown key"),
        (("total_steps = 25000\n", ""), "config.total_steps: missing key"),
        (("witness_nodes = 1\n", "witness_nodes = -1\n"),
         "config.witness_nodes: -1 is out of range for u16"),
        (('Server = "127.0.0.1:20001"', 'Server = 5'),
         "model.LLM.data_location.Server: expected a string"),
        (("[model.LLM.checkpoint.Hub]", "[model.LLM.checkpoint.Cloud]"),
         "model.LLM.checkpoint: unknown variant 'Cloud'"),
        (('run_id = "llama2-20m-test"\n', 'run_id = "llama2-20m-test"\nextra = 1\n'),
         "extra: unknown key"),
        (("warmup_time = 30\n", "warmup_time = 900\n"),
         "config.warmup_time (900) must be less than config.epoch_time (900)"),
    ],
)  # fmt: skip
def test_toml_errors_name_the_key(edit: tuple[str, str], message: str) -> None:
    old, new = edit
    assert old in REFERENCE_STATE
    with pytest.raises(ConfigError) as e:
        rc = run_config_from_obj(parse_toml(REFERENCE_STATE.replace(old, new, 1)))
        rc.check()
    assert str(e.value).startswith(message), str(e.value)


def test_model_extra_data_needs_model_llm() -> None:
    doc = {"config": dict(BASE), "model_extra_data": {"max_seq_len": 1}}
    with pytest.raises(ConfigError, match=r"^model_extra_data needs a \[model.LLM\] table$"):
        run_config_from_obj(doc)


def test_missing_run_id_when_required() -> None:
    text = REFERENCE_STATE.replace('run_id = "llama2-20m-test"\n', "")
    with pytest.raises(ConfigError, match=r"^run_id: missing key"):
        run_config_from_obj(parse_toml(text), require_run_id=True)
    assert run_config_from_obj(parse_toml(text)).run_id is None


def test_malformed_toml() -> None:
    with pytest.raises(ConfigError, match=r"^f.toml: malformed TOML"):
        parse_toml("[config\n", "f.toml")


def test_repo_tiny_state_loads() -> None:
    rc = load_run_config(ROOT / "config" / "tiny" / "state.toml", require_run_id=True)
    assert rc.run_id == "tiny" and rc.warnings == ()
