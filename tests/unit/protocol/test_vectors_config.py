"""Replay the shared config-validity vector (tests/vectors/config/validity.json) and check it is
fresh; the Rust program replays the same file (programs/psyche-coordinator/tests/vectors_config.rs).

Each case is the base run config with a few edits and two expected outcomes: ``protocol`` (the
rules the program's ``update`` also applies) and ``full`` (``RunConfig.check``: validate-config,
the centralized server and update-config). The replay parses the committed JSON itself; the
freshness test re-runs the generator, whose expectations are written out by hand.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from psyche.protocol.run_file import run_config_from_obj
from psyche.protocol.strict_obj import ConfigError

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
FILE = VECTORS / "config" / "validity.json"
REGENERATE = "run .venv/bin/python tests/vectors/gen_config.py"


@cache
def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config", VECTORS / "gen_config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def vector() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FILE.read_text(encoding="utf-8"))
    return doc


def cases() -> list[dict[str, Any]]:
    return list(vector()["cases"])


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$float"}:
            return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[value["$float"]]
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def document(case: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(vector()["base"])
    for path, value in case["set"]:
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[key]
        assert last in node, f"{case['name']}: {path} is not in the base"
        node[last] = decode(value)
    return doc


def verdict(check: str, doc: dict[str, Any]) -> str | None:
    try:
        if check == "full":
            run_config_from_obj(doc, require_run_id=True).check()
        else:
            rc = run_config_from_obj(doc)
            rc.config.check()
            rc.model.check()
            rc.model.check_cold_start_warmup_steps(rc.config)  # type: ignore[attr-defined]
    except ConfigError as e:
        return str(e)
    return None


def names(message: str, field: str) -> bool:
    return message == field or any(message.startswith(field + sep) for sep in (" ", ":"))


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["name"])
@pytest.mark.parametrize("check", ["protocol", "full"])
def test_case(case: dict[str, Any], check: str) -> None:
    got = verdict(check, document(case))
    want = case[check]
    if want is None:
        assert got is None, f"{case['name']}: rejected: {got}"
    else:
        assert got is not None, f"{case['name']}: accepted, expected an error naming {want}"
        assert names(got, want), f"{case['name']}: {got!r} does not name {want}"


def test_vector_is_fresh() -> None:
    gen = load_generator()
    assert gen.dumps(gen.build()) == FILE.read_text(encoding="utf-8"), f"stale: {REGENERATE}"


# Each field of issue 12 finding 5: at least one case where a bad value of it is refused.
REQUIRED_REJECTIONS = [
    "model.LLM.optimizer.Distro.compression_decay",
    "model.LLM.optimizer.Distro.clip_grad_norm",
    "model.LLM.optimizer.Distro.weight_decay",
    "model.LLM.lr_schedule.Cosine.base_lr",
    "model.LLM.lr_schedule.Cosine.warmup_init_lr",
    "model.LLM.lr_schedule.Cosine.final_lr",
    "model.LLM.lr_schedule.Cosine.total_steps",
    "model.LLM.lr_schedule.Linear.total_steps",
    "model.LLM.data_location.Server",
    "model.LLM.data_location.Http.location.SingleUrl",
    "run_state",
]


def test_vector_covers_the_issue() -> None:
    refused = {c["full"] for c in cases() if c["full"] is not None}
    assert not [f for f in REQUIRED_REJECTIONS if f not in refused]
    special = {
        json.dumps(v)
        for c in cases()
        for _, v in c["set"]
        if isinstance(v, dict) and set(v) == {"$float"}
    }
    assert special == {json.dumps({"$float": x}) for x in ("nan", "inf", "-inf")}
    # Cases the program accepts but this client cannot load: the two checks really differ.
    assert any(c["protocol"] is None and c["full"] is not None for c in cases())
