"""Replay the shared coordinator vectors (tests/vectors/coordinator) and check they are fresh.

The replay reads only the committed JSON and parses every event itself (not through the
generator or the Sim), so it checks the coordinator against the same contract the Rust program
replays: the result of every event and the full state after it. The freshness test re-runs the
generator and compares text; the coverage test makes sure the files keep exercising every
operation, result kind and error code.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from psyche.coordinator import state_json
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import (
    CoordinatorErrorCode,
    CoordinatorException,
    TickResult,
    Verdict,
    Witness,
)
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import Committee, CommitteeProof, WitnessProof
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint
from psyche.protocol.strict_obj import from_obj

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
COORDINATOR = VECTORS / "coordinator"
REGENERATE = "run .venv/bin/python tests/vectors/gen_coordinator.py"
UNCHANGED = "unchanged"

OPS = {
    "tick",
    "warmup_witness",
    "witness",
    "health_check",
    "checkpoint",
    "withdraw",
    "pause",
    "resume",
}
EVENT_FIELDS = {
    "tick": ["op", "now", "seed", "pending"],
    "warmup_witness": ["op", "now", "seed", "from", "witness"],
    "witness": ["op", "now", "from", "witness"],
    "health_check": ["op", "from", "checks"],
    "checkpoint": ["op", "now", "from", "index", "checkpoint"],
    "withdraw": ["op", "index"],
    "pause": ["op", "now"],
    "resume": ["op", "now"],
}


@cache
def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_coordinator", VECTORS / "gen_coordinator.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve annotations through sys.modules, so register before executing.
    sys.modules["gen_coordinator"] = module
    spec.loader.exec_module(module)
    return module


def vector_files() -> list[Path]:
    return sorted(COORDINATOR.glob("*.json"))


@cache
def load(name: str, directory: Path = COORDINATOR) -> Any:
    return json.loads((directory / name).read_text(encoding="utf-8"))


# --- event parsing (independent of the generator) -----------------------------------------------


def identity(obj: Any) -> NodeIdentity:
    assert list(obj) == ["signer", "p2p_identity"]
    return NodeIdentity(bytes.fromhex(obj["signer"]), bytes.fromhex(obj["p2p_identity"]))


def bloom(text: str) -> Bloom:
    return Bloom.from_bytes(bytes.fromhex(text))


def witness(obj: Any) -> Witness:
    p = obj["proof"]
    proof = WitnessProof(position=p["position"], index=p["index"], witness=p["witness"])
    v = obj.get("verdict", {"checked": 0, "mismatch": 0})
    assert list(v) == ["checked", "mismatch"]
    verdict = Verdict(checked=v["checked"], mismatch=v["mismatch"])
    return Witness(proof, bloom(obj["participant_bloom"]), bloom(obj["broadcast_bloom"]), verdict)


def committee_proof(obj: Any) -> CommitteeProof:
    return CommitteeProof(Committee[obj["committee"]], obj["position"], obj["index"])


def result_text(result: object) -> str:
    if isinstance(result, TickResult):
        return "Ticked" if result.ticked else f"EpochEnd({str(result.epoch_end).lower()})"
    if isinstance(result, int) and not isinstance(result, bool):
        return f"Dropped({result})"
    assert result is None, result
    return "Ok"


def apply(c: Coordinator, ev: dict[str, Any]) -> object:
    op = ev["op"]
    assert list(ev) == EVENT_FIELDS[op], ev.keys()
    if op == "tick":
        pending = None if ev["pending"] is None else [identity(p) for p in ev["pending"]]
        return c.tick(pending, ev["now"], ev["seed"])
    if op == "warmup_witness":
        c.warmup_witness(identity(ev["from"]), witness(ev["witness"]), ev["now"], ev["seed"])
        return None
    if op == "witness":
        c.witness(identity(ev["from"]), witness(ev["witness"]), ev["now"])
        return None
    if op == "health_check":
        checks = [(identity(x["id"]), committee_proof(x["proof"])) for x in ev["checks"]]
        return c.health_check(identity(ev["from"]), checks)
    if op == "checkpoint":
        ck = from_obj(Checkpoint, ev["checkpoint"], "checkpoint")
        return c.checkpoint(identity(ev["from"]), ev["index"], ck, ev["now"])
    if op == "withdraw":
        c.withdraw(ev["index"])
        return None
    if op == "pause":
        c.pause(ev["now"])
        return None
    if op == "resume":
        c.resume(ev["now"])
        return None
    raise AssertionError(f"unknown op {op!r}")


def outcome(c: Coordinator, ev: dict[str, Any]) -> tuple[str, str]:
    try:
        return "ok", result_text(apply(c, ev))
    except CoordinatorException as e:
        return "error", e.code.name


# --- (a) replay ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", vector_files(), ids=lambda p: p.stem)
def test_replay(path: Path) -> None:
    replay(path)


def replay(path: Path) -> None:
    """Replay one scenario file: every outcome and every state must match."""
    data = load(path.name, path.parent)
    assert list(data) == ["name", "description", "initial", "steps"]
    assert data["name"] == path.stem
    assert data["description"] and data["steps"]
    c = state_json.from_obj_state(data["initial"])
    assert state_json.to_obj_state(c) == data["initial"], "initial state does not round-trip"
    expected_state = data["initial"]
    for i, step in enumerate(data["steps"]):
        ev = step["event"]
        kind = "ok" if "ok" in step else "error"
        assert list(step) == ["event", kind, "state"], step.keys()
        got = outcome(c, ev)
        assert got == (kind, step[kind]), f"step {i} ({ev['op']}): {got} != {kind} {step[kind]}"
        if kind == "error":
            assert step["state"] == UNCHANGED, f"step {i}: a rejected call changed the state"
        if step["state"] != UNCHANGED:
            assert step["state"] != expected_state, f"step {i}: equal state not 'unchanged'"
            expected_state = step["state"]
        actual = state_json.to_obj_state(c)
        if actual != expected_state:
            diff = [k for k in actual if actual[k] != expected_state.get(k)]
            pytest.fail(f"step {i} ({ev['op']}): state differs in {diff}")


# --- (b) freshness ------------------------------------------------------------------------------


def test_vectors_are_fresh() -> None:
    gen = load_generator()
    built = gen.build()
    on_disk = {p.name for p in vector_files()}
    assert set(built) == on_disk, f"scenario files differ from the generator: {REGENERATE}"
    for name, obj in built.items():
        text = (COORDINATOR / name).read_text(encoding="utf-8")
        assert gen.dumps(obj) == text, f"{name} is stale: {REGENERATE}"


def test_dump_format() -> None:
    gen = load_generator()
    obj = {"b": [1, {"a": None}], "a": "x"}
    assert gen.dumps(obj) == '{"b":[1,{"a":null}],"a":"x"}\n'
    for path in vector_files():
        text = path.read_text(encoding="utf-8")
        assert text.endswith("}\n") and "\n" not in text[:-1], path.name
        assert text == json.dumps(load(path.name), separators=(",", ":")) + "\n", path.name


# --- (c) coverage -------------------------------------------------------------------------------


def test_coverage() -> None:
    files = vector_files()
    assert len(files) >= 40, f"only {len(files)} scenarios: {REGENERATE}"
    ops: set[str] = set()
    errors: set[str] = set()
    results: set[str] = set()
    states: set[str] = set()
    total = 0
    for path in files:
        total += path.stat().st_size
        assert path.stat().st_size < 200_000, f"{path.name} is too large"
        data = load(path.name)
        states.add(data["initial"]["run_state"])
        for step in data["steps"]:
            ops.add(step["event"]["op"])
            if "error" in step:
                errors.add(step["error"])
            else:
                results.add(step["ok"].split("(")[0] if "Dropped" in step["ok"] else step["ok"])
            if step["state"] != UNCHANGED:
                states.add(step["state"]["run_state"])
    assert total < 8_000_000
    assert ops == OPS
    assert errors == {e.name for e in CoordinatorErrorCode}
    assert results == {"Ticked", "EpochEnd(true)", "EpochEnd(false)", "Dropped", "Ok"}
    assert states == {
        "Uninitialized",
        "WaitingForMembers",
        "Warmup",
        "RoundTrain",
        "RoundWitness",
        "Cooldown",
        "Finished",
        "Paused",
    }


def test_coverage_of_details() -> None:
    """Specific behaviours the brief asks the vectors to pin down."""
    dropped: set[str] = set()
    checkpoints_in: set[str] = set()
    tick_pending_none = False
    big_pending = False
    for path in vector_files():
        data = load(path.name)
        for step in data["steps"]:
            ev = step["event"]
            if "ok" in step and step["ok"].startswith("Dropped"):
                dropped.add(step["ok"])
            if ev["op"] == "checkpoint" and "ok" in step:
                checkpoints_in.add(next(iter(ev["checkpoint"])))
            if ev["op"] == "tick" and ev["pending"] is None:
                tick_pending_none = True
            if ev["op"] == "tick" and ev["pending"] is not None and len(ev["pending"]) > 256:
                big_pending = True
    assert {"Dropped(0)", "Dropped(1)"} <= dropped
    assert {"Hub", "Gcs"} <= checkpoints_in
    assert tick_pending_none and big_pending
