"""Replay the shared primitive vectors (tests/vectors/primitives) and check they are fresh.

The replay reads only the committed JSON, so it checks the Python implementation against the
contract the Rust program also replays. The freshness test re-runs the generator and compares
text, so a change in either the generator or the implementation shows up as a diff to commit.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from psyche.protocol.bloom import Bloom
from psyche.protocol.commitment import Commitment, sha256v, verify_commitment
from psyche.protocol.committee import Committee, CommitteeSelection, CommitteeSelectionError
from psyche.protocol.data_selection import BatchId, assign_data_for_state, get_batch_ids_for_round
from psyche.protocol.identity import NodeIdentity, SecretKey, verify_signature
from psyche.protocol.shuffle import Lcg, compute_shuffled_index, deterministic_shuffle

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
PRIMITIVES = VECTORS / "primitives"
REGENERATE = "run .venv/bin/python tests/vectors/gen_primitives.py"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_primitives", VECTORS / "gen_primitives.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(name: str) -> Any:
    path = PRIMITIVES / name
    assert path.is_file(), f"{path} is missing: {REGENERATE}"
    return json.loads(path.read_text(encoding="utf-8"))


def selection(case: dict[str, Any]) -> CommitteeSelection:
    return CommitteeSelection(
        tie_breaker_nodes=case["tie_breaker_nodes"],
        witness_nodes=case["witness_nodes"],
        verification_percent=case["verification_percent"],
        total_nodes=case["total_nodes"],
        seed=case["seed"],
    )


def test_swap_or_not() -> None:
    data = load("swap_or_not.json")
    assert data["rounds"] == 90
    assert len(data["cases"]) >= 30
    for case in data["cases"]:
        seed = bytes.fromhex(case["seed"])
        assert compute_shuffled_index(case["index"], case["n"], seed) == case["result"], case
    for perm in data["permutations"]:
        seed = bytes.fromhex(perm["seed"])
        got = [compute_shuffled_index(i, perm["n"], seed) for i in range(perm["n"])]
        assert got == perm["positions"]


def test_lcg() -> None:
    for case in load("lcg.json")["cases"]:
        rng = Lcg(case["seed"])
        assert [rng.next() for _ in case["outputs"]] == case["outputs"]


def test_deterministic_shuffle() -> None:
    for case in load("deterministic_shuffle.json")["cases"]:
        assert deterministic_shuffle(case["items"], case["seed"]) == case["result"], case


def test_committee_selection() -> None:
    data = load("committee_selection.json")
    for case in data["cases"]:
        sel = selection(case)
        assert sel.verifier_nodes == case["verifier_nodes"]
        for index, (c, w) in enumerate(zip(case["committee"], case["witness"], strict=True)):
            proof = sel.get_committee(index)
            assert (int(proof.committee), proof.position) == (c["committee"], c["position"])
            assert proof.committee is Committee(c["committee"])
            witness = sel.get_witness(index)
            assert (witness.position, witness.witness) == (w["position"], w["witness"])
        assert len(case["committee"]) == case["total_nodes"]
    for case in data["errors"]:
        with pytest.raises(CommitteeSelectionError):
            selection({**case, "seed": 0})


def test_data_assignment() -> None:
    data = load("data_assignment.json")
    config = data["selection"]
    for case in data["cases"]:
        clients = [NodeIdentity.from_single_key(bytes.fromhex(h)) for h in case["clients"]]
        sel = CommitteeSelection(**config, total_nodes=len(clients), seed=case["random_seed"])
        retries = [BatchId(r["start"], r["end"]) for r in case["retries"]]
        result = assign_data_for_state(
            clients, sel, case["data_index"], case["batch_size"], case["random_seed"], retries
        )
        got = [
            {"start": b.start, "end": b.end, "signer": n.signer.hex()} for b, n in result.items()
        ]
        assert got == case["assignment"]
        ids = get_batch_ids_for_round(case["data_index"], case["batch_size"], len(clients), retries)
        assert [{"start": b.start, "end": b.end} for b in ids] == case["batch_ids"]
    assert any(case["retries"] for case in data["cases"])
    for case in data["retry_errors"]:
        retries = [BatchId(r["start"], r["end"]) for r in case["retries"]]
        with pytest.raises(ValueError):
            get_batch_ids_for_round(0, case["batch_size"], case["n_clients"], retries)


def test_bloom() -> None:
    data = load("bloom.json")
    assert (data["bits"], data["words"], data["keys"]) == (Bloom.BITS, Bloom.WORDS, Bloom.KEYS)
    for case in data["cases"]:
        f = Bloom(case["seed"])
        assert list(f.keys) == case["keys"]
        for item_hex, positions in zip(case["items"], case["positions"], strict=True):
            item = bytes.fromhex(item_hex)
            assert list(f.positions(item)) == positions
            f.add(item)
        assert list(f.words) == case["words"]
        assert f.to_bytes().hex() == case["bytes"]
        assert Bloom.from_bytes(bytes.fromhex(case["bytes"])) == f
        for probe in case["probes"]:
            assert f.contains(bytes.fromhex(probe["item"])) == probe["contains"]


def test_commitments() -> None:
    data = load("commitments.json")
    for case in data["sha256v"]:
        assert sha256v(*(bytes.fromhex(p) for p in case["parts"])).hex() == case["digest"]
    for case in data["ed25519"]:
        key = SecretKey.from_bytes(bytes.fromhex(case["seed"]))
        pub = key.public_key()
        assert pub.hex() == case["public_key"]
        for sig in case["signatures"]:
            message = bytes.fromhex(sig["message"])
            assert key.sign(message).hex() == sig["signature"]
            assert verify_signature(pub, message, bytes.fromhex(sig["signature"]))
    for case in data["commitments"]:
        key = SecretKey.from_bytes(bytes.fromhex(case["seed"]))
        commitment = Commitment.from_bytes(bytes.fromhex(case["commitment"]))
        assert commitment.data_hash.hex() == case["data_hash"]
        assert verify_commitment(bytes.fromhex(case["public_key"]), commitment)
        assert key.public_key().hex() == case["public_key"]


def test_committed_vectors_are_fresh() -> None:
    generator = load_generator()
    built: dict[str, object] = generator.build()
    committed = {p.name for p in PRIMITIVES.glob("*.json")}
    assert committed == set(built), f"vector files differ from the generator's: {REGENERATE}"
    for name, obj in built.items():
        expected = generator.dumps(obj)
        actual = (PRIMITIVES / name).read_text(encoding="utf-8")
        assert actual == expected, f"{name} is stale: {REGENERATE}"
