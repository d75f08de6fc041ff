"""Replay the result-verification vectors (tests/vectors/verification) and check they are fresh.

Same contract and replay as the coordinator vectors (``test_vectors_coordinator``); kept in their
own directory because the Rust program mirrors only the plain-value rules so far (``rules/``,
replayed by ``tests/vectors_verification.rs``), not yet the witness's verdict field
(docs/protocol.md, "Threat model and result verification").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_vectors_coordinator import VECTORS, load_generator, replay

VERIFICATION = VECTORS / "verification"
REGENERATE = "run .venv/bin/python tests/vectors/gen_coordinator.py"


def vector_files() -> list[Path]:
    return sorted(VERIFICATION.glob("*.json"))


@pytest.mark.parametrize("path", vector_files(), ids=lambda p: p.stem)
def test_replay(path: Path) -> None:
    replay(path)


def test_vectors_are_fresh() -> None:
    gen = load_generator()
    built = gen.build(gen.VERIFICATION_SCENARIOS)
    assert set(built) == {p.name for p in vector_files()}, f"files differ: {REGENERATE}"
    for name, obj in built.items():
        text = (VERIFICATION / name).read_text(encoding="utf-8")
        assert gen.dumps(obj) == text, f"{name} is stale: {REGENERATE}"


def test_vectors_carry_verdicts_and_their_outcomes() -> None:
    """The files exercise what they are for: verdict-carrying witnesses accepted and refused,
    and ticks that eject (a Healthy client becomes Ejected without a health check)."""
    accepted = refused = ejections = 0
    for path in vector_files():
        data = json.loads(path.read_text(encoding="utf-8"))
        for step in data["steps"]:
            ev = step["event"]
            if ev["op"] == "witness" and "verdict" in ev["witness"]:
                accepted += "ok" in step
                refused += "error" in step
            if ev["op"] == "tick" and step["state"] != "unchanged":
                exited = step["state"]["epoch_state"]["exited_clients"]
                ejections += sum(c["state"] == "Ejected" for c in exited)
    assert accepted >= 6 and refused >= 5 and ejections >= 3


def test_rules_vector_is_fresh() -> None:
    """The plain-value rules the Rust program replays (tests/vectors_verification.rs)."""
    gen = load_generator()
    text = (VERIFICATION / "rules" / "rules.json").read_text(encoding="utf-8")
    assert gen.dumps(gen.verification_rules()) == text, f"rules.json is stale: {REGENERATE}"
