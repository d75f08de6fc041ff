"""Generate ``tests/vectors/config/validity.json``: which run configs are valid, and why not.

One valid base run config and a list of cases, each a few edits of it with the expected outcome
of two checks: ``protocol`` (``CoordinatorConfig.check``, ``LLM.check`` and the cold-start rule:
exactly what the program's ``update`` applies, ``Model::check`` and friends in Rust) and ``full``
(``RunConfig.check``: what ``validate-config``, the centralized server and ``update-config``
apply, i.e. ``protocol`` plus the run's own keys and what this client cannot load). Python
(``tests/unit/protocol/test_vectors_config.py``) and Rust
(``programs/psyche-coordinator/tests/vectors_config.rs``) replay every case.

The expectations are written here by hand, one per case, and checked against Python while the
file is built: a rule change fails here loudly before it changes the vector. Regenerate after an
intentional change::

    .venv/bin/python tests/vectors/gen_config.py

The format is described in ``tests/vectors/README.md`` ("Config validity").
"""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path
from typing import Any

from psyche.protocol.run_file import run_config_from_obj
from psyche.protocol.strict_obj import ConfigError

OUT = Path(__file__).resolve().parent / "config" / "validity.json"

NAN, INF = math.nan, math.inf

# config/tiny/state.toml, as serde JSON (every key present, field order as on chain).
BASE: dict[str, Any] = {
    "run_id": "tiny",
    "run_state": "WaitingForMembers",
    "config": {
        "warmup_time": 60,
        "cooldown_time": 10,
        "max_round_train_time": 30,
        "round_witness_time": 1,
        "global_batch_size_warmup_tokens": 0,
        "epoch_time": 240,
        "total_steps": 10,
        "init_min_clients": 3,
        "min_clients": 2,
        "witness_nodes": 2,
        "global_batch_size_start": 6,
        "global_batch_size_end": 6,
        "verification_percent": 0,
        "waiting_for_members_extra_time": 1,
    },
    "model": {
        "LLM": {
            "max_seq_len": 64,
            "cold_start_warmup_steps": 0,
            "architecture": "HfLlama",
            "checkpoint": {"Hub": {"repo_id": "runs/tiny/model", "revision": None}},
            "data_type": "Pretraining",
            "data_location": {"Server": "127.0.0.1:20001"},
            "lr_schedule": {
                "Cosine": {
                    "base_lr": 0.004,
                    "warmup_steps": 2,
                    "warmup_init_lr": 0.0,
                    "total_steps": 10,
                    "final_lr": 0.0004,
                }
            },
            "optimizer": {
                "Distro": {
                    "clip_grad_norm": 1.0,
                    "weight_decay": None,
                    "compression_decay": 0.999,
                    "compression_topk": 8,
                    "compression_chunk": 64,
                    "quantize_1bit": True,
                }
            },
        }
    },
}

LLM = "model.LLM"
DISTRO = f"{LLM}.optimizer.Distro"
SPARSELOCO = f"{LLM}.optimizer.SparseLoCo"
# What validate-config says of a valid SparseLoCo config (None: this client trains with it).
SPARSELOCO_FULL: str | None = None
COSINE = f"{LLM}.lr_schedule.Cosine"
DATA = f"{LLM}.data_location"


def linear(**kw: Any) -> dict[str, Any]:
    base = {"base_lr": 0.01, "warmup_steps": 0, "warmup_init_lr": 0.0, "total_steps": 5}
    return {"Linear": {**base, "final_lr": 0.001, **kw}}


def constant(**kw: Any) -> dict[str, Any]:
    return {"Constant": {"base_lr": 0.01, "warmup_steps": 0, "warmup_init_lr": 0.0, **kw}}


def wsd(**kw: Any) -> dict[str, Any]:
    return {
        "WarmupStableDecay": {
            "base_lr": 1.0,
            "warmup_init_lr": 0.0,
            "cosine_decay_final_lr": 0.5,
            "linear_decay_final_lr": 0.1,
            "warmup_steps": 1,
            "stable_steps": 2,
            "cosine_decay_steps": 3,
            "linear_decay_steps": 4,
            **kw,
        }
    }


def adamw(**kw: Any) -> dict[str, Any]:
    base = {"betas": [0.9, 0.95], "weight_decay": 0.1, "eps": 1e-8, "clip_grad_norm": 1.0}
    return {"AdamW": {**base, **kw}}


def sparseloco(**kw: Any) -> dict[str, Any]:
    base = {
        "betas": [0.9, 0.95],
        "weight_decay": 0.1,
        "eps": 1e-8,
        "clip_grad_norm": 1.0,
        "inner_steps": 4,
        "outer_lr": 0.7,
        "outer_momentum": 0.0,
        "topk_chunk": 64,
        "topk": 2,
        "value_bits": 2,
        "error_decay": 0.95,
    }
    return {"SparseLoCo": {**base, **kw}}


def http(location: Any) -> dict[str, Any]:
    return {
        "Http": {"location": location, "token_size_in_bytes": "TwoBytes", "shuffle": "DontShuffle"}
    }


def numbered(**kw: Any) -> dict[str, Any]:
    base = {"url_template": "https://h/{}.npy", "start_index": 0, "n_left_pad_zeros": 3}
    return {"NumberedFiles": {**base, "num_files": 2, **kw}}


# (name, edits {dotted path: value}, protocol error field or None, full error field or None,
# SAME: as protocol). A field is the dotted key the error message starts with.
SAME = "same"

CASES: list[tuple[str, dict[str, Any], str | None, str | None]] = [
    ("base", {}, None, None),
    # --- the run's own keys (Python only; the program has no run_state to load) ---------------
    ("run_state_unknown", {"run_state": "Bogus"}, None, "run_state"),
    ("run_state_paused", {"run_state": "Paused"}, None, "run_state"),
    ("run_id_empty", {"run_id": ""}, None, "run_id"),
    ("run_id_with_nul", {"run_id": "ti\u0000ny"}, None, "run_id"),
    # --- CoordinatorConfig ----------------------------------------------------------------------
    ("config_total_steps_0", {"config.total_steps": 0}, "config.total_steps", SAME),
    ("config_epoch_time_0", {"config.epoch_time": 0, "config.warmup_time": 0},
     "config.epoch_time", SAME),
    ("config_verification_percent", {"config.verification_percent": 101},
     "config.verification_percent", SAME),
    ("config_verification_percent_100_is_valid", {"config.verification_percent": 100}, None, None),
    ("config_witness_nodes_0_is_valid", {"config.witness_nodes": 0}, None, None),
    ("config_witness_nodes_1_is_valid", {"config.witness_nodes": 1}, None, None),
    # Counters and clock (tests/unit/protocol/test_config_runnable.py derives these from the
    # coordinator): the slowest tiny epoch is 8 steps and the epoch counter a u16; steps reach
    # total_steps + 2 in a u32; a limit's deadline must fit the u64 clock from before 2106.
    ("config_total_steps_epoch_counter", {"config.total_steps": 65535 * 8 + 2},
     "config.total_steps", SAME),
    ("config_total_steps_epoch_counter_max", {"config.total_steps": 65535 * 8 + 1}, None, None),
    ("config_total_steps_step_counter",
     {"config.total_steps": 2**32 - 2, "config.epoch_time": 2**63}, "config.total_steps", SAME),
    ("config_total_steps_step_counter_max",
     {"config.total_steps": 2**32 - 3, "config.epoch_time": 2**63}, None, None),
    ("config_cooldown_time_beyond_clock", {"config.cooldown_time": 2**64 - 2**32},
     "config.cooldown_time", SAME),
    ("config_cooldown_time_max", {"config.cooldown_time": 2**64 - 1 - 2**32}, None, None),
    ("config_round_witness_time_beyond_clock", {"config.round_witness_time": 2**64 - 1},
     "config.round_witness_time", SAME),
    ("config_epoch_time_beyond_clock", {"config.epoch_time": 2**64 - 1},
     "config.epoch_time", SAME),
    ("config_epoch_of_one_round_is_valid", {"config.epoch_time": 61}, None, None),
    # --- DisTrO ---------------------------------------------------------------------------------
    ("distro_compression_decay_above_1", {f"{DISTRO}.compression_decay": 1.5},
     f"{DISTRO}.compression_decay", SAME),
    ("distro_compression_decay_negative", {f"{DISTRO}.compression_decay": -0.1},
     f"{DISTRO}.compression_decay", SAME),
    ("distro_compression_decay_nan", {f"{DISTRO}.compression_decay": NAN},
     f"{DISTRO}.compression_decay", SAME),
    ("distro_compression_decay_inf", {f"{DISTRO}.compression_decay": INF},
     f"{DISTRO}.compression_decay", SAME),
    ("distro_compression_decay_0", {f"{DISTRO}.compression_decay": 0.0}, None, None),
    ("distro_compression_decay_1", {f"{DISTRO}.compression_decay": 1.0}, None, None),
    ("distro_clip_nan", {f"{DISTRO}.clip_grad_norm": NAN}, f"{DISTRO}.clip_grad_norm", SAME),
    ("distro_clip_inf", {f"{DISTRO}.clip_grad_norm": INF}, f"{DISTRO}.clip_grad_norm", SAME),
    ("distro_clip_minus_inf", {f"{DISTRO}.clip_grad_norm": -INF},
     f"{DISTRO}.clip_grad_norm", SAME),
    ("distro_clip_0", {f"{DISTRO}.clip_grad_norm": 0.0}, f"{DISTRO}.clip_grad_norm", SAME),
    ("distro_clip_negative", {f"{DISTRO}.clip_grad_norm": -1.0},
     f"{DISTRO}.clip_grad_norm", SAME),
    # f32 fields: finite as an f64 but not as the f32 the program stores.
    ("distro_clip_overflows_f32", {f"{DISTRO}.clip_grad_norm": 1e39},
     f"{DISTRO}.clip_grad_norm", SAME),
    ("distro_clip_underflows_f32_to_0", {f"{DISTRO}.clip_grad_norm": 1e-50},
     f"{DISTRO}.clip_grad_norm", SAME),
    ("distro_clip_large_f32", {f"{DISTRO}.clip_grad_norm": 1e38}, None, None),
    ("distro_clip_unset", {f"{DISTRO}.clip_grad_norm": None}, None, None),
    ("distro_weight_decay_negative", {f"{DISTRO}.weight_decay": -0.1},
     f"{DISTRO}.weight_decay", SAME),
    ("distro_weight_decay_nan", {f"{DISTRO}.weight_decay": NAN}, f"{DISTRO}.weight_decay", SAME),
    ("distro_weight_decay_0", {f"{DISTRO}.weight_decay": 0.0}, None, None),
    ("distro_weight_decay_inf", {f"{DISTRO}.weight_decay": INF}, f"{DISTRO}.weight_decay", SAME),
    ("distro_weight_decay_overflows_f32", {f"{DISTRO}.weight_decay": 1e39},
     f"{DISTRO}.weight_decay", SAME),
    ("distro_topk_0", {f"{DISTRO}.compression_topk": 0}, f"{DISTRO}.compression_topk", SAME),
    ("distro_chunk_0", {f"{DISTRO}.compression_chunk": 0}, f"{DISTRO}.compression_chunk", SAME),
    # Both 0: the program's order reports compression_chunk first.
    ("distro_chunk_and_topk_0",
     {f"{DISTRO}.compression_chunk": 0, f"{DISTRO}.compression_topk": 0},
     f"{DISTRO}.compression_chunk", SAME),
    ("distro_u16_max", {f"{DISTRO}.compression_chunk": 65535, f"{DISTRO}.compression_topk": 65535},
     None, None),
    ("distro_unquantized", {f"{DISTRO}.quantize_1bit": False}, None, None),
    ("optimizer_dummy", {f"{LLM}.optimizer": "Dummy"}, f"{LLM}.optimizer", SAME),
    # --- AdamW: valid for the protocol, but no client of ours trains with it -----------------
    ("adamw_valid_but_unsupported", {f"{LLM}.optimizer": adamw()}, None,
     f"{LLM}.optimizer.AdamW"),
    ("adamw_beta_1", {f"{LLM}.optimizer": adamw(betas=[0.9, 1.0])},
     f"{LLM}.optimizer.AdamW.betas[1]", SAME),
    ("adamw_eps_0", {f"{LLM}.optimizer": adamw(eps=0.0)}, f"{LLM}.optimizer.AdamW.eps", SAME),
    ("adamw_clip_nan", {f"{LLM}.optimizer": adamw(clip_grad_norm=NAN)},
     f"{LLM}.optimizer.AdamW.clip_grad_norm", SAME),
    # --- SparseLoCo (issue 30) ------------------------------------------------------------------
    ("sparseloco_valid", {f"{LLM}.optimizer": sparseloco()}, None, SPARSELOCO_FULL),
    ("sparseloco_edges_valid",
     {f"{LLM}.optimizer": sparseloco(inner_steps=64, outer_momentum=0.99, topk=64, value_bits=1,
                                      error_decay=1.0, clip_grad_norm=None, weight_decay=0.0)},
     None, SPARSELOCO_FULL),
    ("sparseloco_one_step_one_value_valid",
     {f"{LLM}.optimizer": sparseloco(inner_steps=1, topk_chunk=1, topk=1)}, None,
     SPARSELOCO_FULL),
    ("sparseloco_beta_1", {f"{LLM}.optimizer": sparseloco(betas=[1.0, 0.95])},
     f"{SPARSELOCO}.betas[0]", SAME),
    ("sparseloco_weight_decay_negative", {f"{LLM}.optimizer": sparseloco(weight_decay=-0.1)},
     f"{SPARSELOCO}.weight_decay", SAME),
    ("sparseloco_eps_0", {f"{LLM}.optimizer": sparseloco(eps=0.0)}, f"{SPARSELOCO}.eps", SAME),
    ("sparseloco_clip_0", {f"{LLM}.optimizer": sparseloco(clip_grad_norm=0.0)},
     f"{SPARSELOCO}.clip_grad_norm", SAME),
    ("sparseloco_inner_steps_0", {f"{LLM}.optimizer": sparseloco(inner_steps=0)},
     f"{SPARSELOCO}.inner_steps", SAME),
    ("sparseloco_inner_steps_65", {f"{LLM}.optimizer": sparseloco(inner_steps=65)},
     f"{SPARSELOCO}.inner_steps", SAME),
    ("sparseloco_outer_lr_0", {f"{LLM}.optimizer": sparseloco(outer_lr=0.0)},
     f"{SPARSELOCO}.outer_lr", SAME),
    ("sparseloco_outer_lr_inf", {f"{LLM}.optimizer": sparseloco(outer_lr=INF)},
     f"{SPARSELOCO}.outer_lr", SAME),
    ("sparseloco_outer_lr_overflows_f32", {f"{LLM}.optimizer": sparseloco(outer_lr=1e39)},
     f"{SPARSELOCO}.outer_lr", SAME),
    ("sparseloco_outer_momentum_1", {f"{LLM}.optimizer": sparseloco(outer_momentum=1.0)},
     f"{SPARSELOCO}.outer_momentum", SAME),
    ("sparseloco_outer_momentum_negative",
     {f"{LLM}.optimizer": sparseloco(outer_momentum=-0.5)}, f"{SPARSELOCO}.outer_momentum", SAME),
    ("sparseloco_topk_chunk_0", {f"{LLM}.optimizer": sparseloco(topk_chunk=0, topk=0)},
     f"{SPARSELOCO}.topk_chunk", SAME),
    ("sparseloco_topk_0", {f"{LLM}.optimizer": sparseloco(topk=0)}, f"{SPARSELOCO}.topk", SAME),
    ("sparseloco_topk_above_chunk", {f"{LLM}.optimizer": sparseloco(topk=65)},
     f"{SPARSELOCO}.topk", SAME),
    ("sparseloco_value_bits_0", {f"{LLM}.optimizer": sparseloco(value_bits=0)},
     f"{SPARSELOCO}.value_bits", SAME),
    ("sparseloco_value_bits_3", {f"{LLM}.optimizer": sparseloco(value_bits=3)},
     f"{SPARSELOCO}.value_bits", SAME),
    ("sparseloco_error_decay_0", {f"{LLM}.optimizer": sparseloco(error_decay=0.0)},
     f"{SPARSELOCO}.error_decay", SAME),
    ("sparseloco_error_decay_above_1", {f"{LLM}.optimizer": sparseloco(error_decay=1.01)},
     f"{SPARSELOCO}.error_decay", SAME),
    ("sparseloco_error_decay_nan", {f"{LLM}.optimizer": sparseloco(error_decay=NAN)},
     f"{SPARSELOCO}.error_decay", SAME),
    ("sparseloco_error_decay_underflows_f32_to_0",
     {f"{LLM}.optimizer": sparseloco(error_decay=1e-50)}, f"{SPARSELOCO}.error_decay", SAME),
    # Several bad values: the first in the program's order (inner_steps before value_bits).
    ("sparseloco_first_broken_rule",
     {f"{LLM}.optimizer": sparseloco(inner_steps=0, value_bits=3)},
     f"{SPARSELOCO}.inner_steps", SAME),
    # --- learning rates -------------------------------------------------------------------------
    ("cosine_base_lr_negative", {f"{COSINE}.base_lr": -1.0}, f"{COSINE}.base_lr", SAME),
    ("cosine_base_lr_nan", {f"{COSINE}.base_lr": NAN}, f"{COSINE}.base_lr", SAME),
    ("cosine_base_lr_inf", {f"{COSINE}.base_lr": INF}, f"{COSINE}.base_lr", SAME),
    ("cosine_warmup_init_lr_minus_inf", {f"{COSINE}.warmup_init_lr": -INF},
     f"{COSINE}.warmup_init_lr", SAME),
    ("cosine_final_lr_nan", {f"{COSINE}.final_lr": NAN}, f"{COSINE}.final_lr", SAME),
    ("cosine_total_steps_0", {f"{COSINE}.total_steps": 0}, f"{COSINE}.total_steps", SAME),
    ("cosine_total_steps_1", {f"{COSINE}.total_steps": 1}, None, None),
    ("cosine_lrs_0", {f"{COSINE}.base_lr": 0.0, f"{COSINE}.final_lr": 0.0}, None, None),
    ("linear_valid", {f"{LLM}.lr_schedule": linear()}, None, None),
    ("linear_total_steps_0", {f"{LLM}.lr_schedule": linear(total_steps=0)},
     f"{LLM}.lr_schedule.Linear.total_steps", SAME),
    ("linear_final_lr_negative", {f"{LLM}.lr_schedule": linear(final_lr=-0.001)},
     f"{LLM}.lr_schedule.Linear.final_lr", SAME),
    ("constant_valid", {f"{LLM}.lr_schedule": constant()}, None, None),
    ("constant_base_lr_nan", {f"{LLM}.lr_schedule": constant(base_lr=NAN)},
     f"{LLM}.lr_schedule.Constant.base_lr", SAME),
    ("wsd_valid", {f"{LLM}.lr_schedule": wsd()}, None, None),
    ("wsd_warmup_init_lr_nan", {f"{LLM}.lr_schedule": wsd(warmup_init_lr=NAN)},
     f"{LLM}.lr_schedule.WarmupStableDecay.warmup_init_lr", SAME),
    ("wsd_linear_final_lr_inf", {f"{LLM}.lr_schedule": wsd(linear_decay_final_lr=INF)},
     f"{LLM}.lr_schedule.WarmupStableDecay.linear_decay_final_lr", SAME),
    ("wsd_order", {f"{LLM}.lr_schedule": wsd(linear_decay_final_lr=0.6)},
     f"{LLM}.lr_schedule.WarmupStableDecay", SAME),
    # --- data locations -------------------------------------------------------------------------
    ("server_empty", {DATA: {"Server": ""}}, f"{DATA}.Server", SAME),
    ("server_no_port", {DATA: {"Server": "nonsense"}}, f"{DATA}.Server", SAME),
    ("server_port_0", {DATA: {"Server": "host:0"}}, f"{DATA}.Server", SAME),
    ("server_port_65536", {DATA: {"Server": "host:65536"}}, f"{DATA}.Server", SAME),
    ("server_port_sign", {DATA: {"Server": "host:+80"}}, f"{DATA}.Server", SAME),
    ("server_port_not_ascii", {DATA: {"Server": "host:\uff18\uff10"}}, f"{DATA}.Server", SAME),
    ("server_port_empty", {DATA: {"Server": "host:"}}, f"{DATA}.Server", SAME),
    ("server_host_empty", {DATA: {"Server": ":80"}}, f"{DATA}.Server", SAME),
    ("server_host_space", {DATA: {"Server": "a b:80"}}, f"{DATA}.Server", SAME),
    ("server_ipv6_unbracketed", {DATA: {"Server": "::1:80"}}, f"{DATA}.Server", SAME),
    ("server_ipv6_unclosed", {DATA: {"Server": "[::1:80"}}, f"{DATA}.Server", SAME),
    ("server_ipv6", {DATA: {"Server": "[::1]:20001"}}, None, None),
    ("server_hostname_port_65535", {DATA: {"Server": "data-1.example_net:65535"}}, None, None),
    ("server_leading_zeros", {DATA: {"Server": "h:00080"}}, None, None),
    ("local_empty", {DATA: {"Local": ""}}, f"{DATA}.Local", SAME),
    ("local_nul", {DATA: {"Local": "runs/\u0000x"}}, f"{DATA}.Local", SAME),
    ("local_valid", {DATA: {"Local": "runs/tiny/data"}}, None, None),
    ("dummy_data_valid", {DATA: "Dummy"}, None, None),
    ("http_url_empty", {DATA: http({"SingleUrl": ""})}, f"{DATA}.Http.location", SAME),
    ("http_url_not_http", {DATA: http({"SingleUrl": "ftp://h/t.bin"})},
     f"{DATA}.Http.location.SingleUrl", SAME),
    ("http_url_no_host", {DATA: http({"SingleUrl": "https:///t.bin"})},
     f"{DATA}.Http.location.SingleUrl", SAME),
    ("http_url_space", {DATA: http({"SingleUrl": "https://h/a b.bin"})},
     f"{DATA}.Http.location.SingleUrl", SAME),
    ("http_url_valid", {DATA: http({"SingleUrl": "https://h:8080/t.bin?x=1"})}, None, None),
    ("numbered_valid", {DATA: http(numbered())}, None, None),
    ("numbered_no_placeholder", {DATA: http(numbered(url_template="https://h/0.npy"))},
     f"{DATA}.Http.location.NumberedFiles.url_template", SAME),
    ("numbered_two_placeholders", {DATA: http(numbered(url_template="https://h/{}/{}.npy"))},
     f"{DATA}.Http.location.NumberedFiles.url_template", SAME),
    ("numbered_no_files", {DATA: http(numbered(num_files=0))},
     f"{DATA}.Http.location.NumberedFiles.num_files", SAME),
    ("gcp_valid", {DATA: http({"Gcp": {"bucket_name": "nous-pre_training.1",
                                        "filter_directory": "x"}})}, None, None),
    ("gcp_bucket_empty", {DATA: http({"Gcp": {"bucket_name": "", "filter_directory": ""}})},
     f"{DATA}.Http.location.Gcp.bucket_name", SAME),
    ("gcp_bucket_upper", {DATA: http({"Gcp": {"bucket_name": "My Bucket",
                                               "filter_directory": ""}})},
     f"{DATA}.Http.location.Gcp.bucket_name", SAME),
    ("weighted_http_not_url", {DATA: {"WeightedHttp": "weights.json"}},
     f"{DATA}.WeightedHttp", SAME),
    ("weighted_http_valid", {DATA: {"WeightedHttp": "https://h/w.json"}}, None, None),
    ("preprocessed_valid", {DATA: {"Preprocessed": "p"}}, None, None),
    # --- checkpoint, architecture, sequence length ----------------------------------------------
    ("checkpoint_ephemeral", {f"{LLM}.checkpoint": "Ephemeral"}, f"{LLM}.checkpoint", SAME),
    ("checkpoint_hub_empty", {f"{LLM}.checkpoint": {"Hub": {"repo_id": "", "revision": None}}},
     f"{LLM}.checkpoint.Hub.repo_id", SAME),
    ("checkpoint_p2p_valid", {f"{LLM}.checkpoint": {"P2P": {"repo_id": "r", "revision": None}}},
     None, None),
    ("checkpoint_gcs_valid",
     {f"{LLM}.checkpoint": {"Gcs": {"bucket": "b", "prefix": None}}}, None, None),
    ("checkpoint_dummy_unsupported",
     {f"{LLM}.checkpoint": {"Dummy": {"repo_id": "d", "revision": None}}}, None,
     f"{LLM}.checkpoint.Dummy"),
    ("architecture_torchtitan_unsupported", {f"{LLM}.architecture": "Torchtitan"}, None,
     f"{LLM}.architecture"),
    ("max_seq_len_0", {f"{LLM}.max_seq_len": 0}, f"{LLM}.max_seq_len", SAME),
    # (240 - 60) / 30 = 6 rounds fit one epoch.
    ("cold_start_fits", {f"{LLM}.cold_start_warmup_steps": 6}, None, None),
    ("cold_start_too_long", {f"{LLM}.cold_start_warmup_steps": 7},
     f"{LLM}.cold_start_warmup_steps", SAME),
]  # fmt: skip


def encode(value: Any) -> Any:
    """JSON has no NaN or infinities: they are written as {"$float": "nan" | "inf" | "-inf"}."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$float"}:
            return float(value["$float"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def apply(doc: dict[str, Any], edits: list[list[Any]]) -> dict[str, Any]:
    """``doc`` with each ``[dotted path, value]`` set (the parent tables must exist)."""
    out = copy.deepcopy(doc)
    for path, value in edits:
        *parents, last = path.split(".")
        node = out
        for key in parents:
            node = node[key]
        if last not in node:
            raise KeyError(f"{path}: no such key in the base")
        node[last] = decode(value)
    return out


def field_of(message: str, field: str) -> bool:
    """Does ``message`` report ``field``? It names it first, then a space, '(' or ':'."""
    return message == field or any(message.startswith(field + sep) for sep in (" ", ":"))


def protocol_check(doc: dict[str, Any]) -> None:
    """The program's rules: config, model, then the cold-start limit (``update``'s order)."""
    rc = run_config_from_obj(doc)
    rc.config.check()
    rc.model.check()
    rc.model.check_cold_start_warmup_steps(rc.config)  # type: ignore[attr-defined]


def full_check(doc: dict[str, Any]) -> None:
    run_config_from_obj(doc, require_run_id=True).check()


def outcome(check: Any, doc: dict[str, Any]) -> str | None:
    try:
        check(doc)
    except ConfigError as e:
        return str(e)
    return None


def build() -> dict[str, Any]:
    cases = []
    names = set()
    for name, edits, protocol, full in CASES:
        assert name not in names, name
        names.add(name)
        full = protocol if full == SAME else full
        encoded = [[path, encode(value)] for path, value in edits.items()]
        doc = apply(BASE, encoded)
        for kind, check, want in (("protocol", protocol_check, protocol),
                                  ("full", full_check, full)):  # fmt: skip
            got = outcome(check, doc)
            ok = got is None if want is None else got is not None and field_of(got, want)
            assert ok, f"{name}: {kind} check gave {got!r}, the case expects {want!r}"
        cases.append({"name": name, "set": encoded, "protocol": protocol, "full": full})
    return {
        "description": "Run configs (base + edits) and whether each passes the protocol rules "
        "(the program's update) and the full rules (validate-config); see "
        "tests/vectors/README.md",
        "base": BASE,
        "cases": cases,
    }


def dumps(obj: object) -> str:
    return json.dumps(obj, indent=1, ensure_ascii=True, allow_nan=False) + "\n"


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    obj = build()
    OUT.write_text(dumps(obj), encoding="utf-8")
    print(f"wrote {len(obj['cases'])} cases to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
