"""Loading the committed IDLs for the tests that need them (skipped until they exist)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psyche.coordinator import Coordinator
from psyche.coordinator.state_json import from_obj_state
from psyche.solana.idl import IdlCodec

ROOT = Path(__file__).resolve().parents[3]
IDL_DIR = ROOT / "idl"
VECTORS = ROOT / "tests" / "vectors"

needs_coordinator_idl = pytest.mark.skipif(
    not (IDL_DIR / "psyche_coordinator.json").is_file(),
    reason="idl/psyche_coordinator.json is not committed yet",
)
needs_authorizer_idl = pytest.mark.skipif(
    not (IDL_DIR / "psyche_authorizer.json").is_file(),
    reason="idl/psyche_authorizer.json is not committed yet",
)


def coordinator_idl() -> IdlCodec:
    return IdlCodec.load(IDL_DIR / "psyche_coordinator.json")


def authorizer_idl() -> IdlCodec:
    return IdlCodec.load(IDL_DIR / "psyche_authorizer.json")


def vector_states(limit: int | None = None) -> list[tuple[str, Coordinator]]:
    """Every full state in the coordinator scenario vectors (rich, reachable states)."""
    out = []
    for path in sorted((VECTORS / "coordinator").glob("*.json")):
        doc = json.loads(path.read_text())
        states = [doc["initial"]] + [s["state"] for s in doc["steps"] if s["state"] != "unchanged"]
        out += [(f"{path.stem}[{i}]", from_obj_state(s)) for i, s in enumerate(states)]
    return out[:limit]
