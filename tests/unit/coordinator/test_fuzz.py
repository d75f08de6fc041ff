"""Fuzzing the decoders and the handlers with garbage.

* ``state_json.from_obj_state`` on random JSON values and on mutated valid states: only
  ``ConfigError`` may come out, and its message starts with the path of the offending key.
* ``run_config_from_obj(parse_toml(...))`` + ``.check()`` on random text and on mutated versions
  of a valid state.toml: only ``ConfigError``, naming a key (or, for unparsable text, saying the
  TOML is malformed).
* Every handler fed random witnesses, proofs, indices and identities in every phase: only
  ``CoordinatorException``, and a rejected call leaves the state untouched.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psyche.coordinator import state_json
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.coordinator.types import CoordinatorException, Witness
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import Committee, CommitteeProof, WitnessProof
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import (
    DummyCheckpoint,
    EphemeralCheckpoint,
    GcsCheckpoint,
    GcsRepo,
    HubCheckpoint,
    HubRepo,
    P2PCheckpoint,
    P2PGcsCheckpoint,
)
from psyche.protocol.run_file import parse_toml, run_config_from_obj
from psyche.protocol.strict_obj import ConfigError

from .support import RS, phase

ROOT = Path(__file__).resolve().parents[3]
TINY_STATE = (ROOT / "config" / "tiny" / "state.toml").read_text(encoding="utf-8")
VECTOR_DIR = ROOT / "tests" / "vectors" / "coordinator"

TOP_KEYS = (
    "run_id",
    "run_state",
    "config",
    "model",
    "progress",
    "epoch_state",
    "run_state_start_unix_timestamp",
    "pending_pause",
)
STATE_PATH = re.compile(r"^(\$|[a-z_]+)([.\[:]|$)")


def names_state_key(message: str) -> bool:
    m = STATE_PATH.match(message)
    return m is not None and (m.group(1) == "$" or m.group(1) in TOP_KEYS)


def _all_keys() -> set[str]:
    """Every key and variant name a run config can contain."""
    import dataclasses

    from psyche.protocol import coordinator_config, locations, lr_schedules, model, optimizers
    from psyche.protocol.strict_obj import Tagged

    names = {"run_id", "run_state", "config", "model", "progress", "epoch_state", "metadata"}
    names |= {"model_extra_data", "LLM"}
    modules = (coordinator_config, locations, lr_schedules, model, optimizers)
    for obj in (o for m in modules for o in vars(m).values()):
        if isinstance(obj, type) and dataclasses.is_dataclass(obj):
            names |= {f.name for f in dataclasses.fields(obj)}
        if isinstance(obj, type) and issubclass(obj, Tagged) and obj.TAG:
            names.add(obj.TAG)
    return names


KEY_NAMES = _all_keys()
KEY_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def names_config_key(message: str) -> bool:
    if "malformed TOML" in message:
        return True
    return any(w in KEY_NAMES for w in KEY_WORD.findall(message))


def valid_state() -> dict[str, Any]:
    """A rich valid state: the final state of a vector with witnesses, exits and a P2P model."""
    data = json.loads((VECTOR_DIR / "health_check_ejects_silent_client.json").read_text())
    states = [s["state"] for s in data["steps"] if s["state"] != "unchanged"]
    return copy.deepcopy(states[-1])


VALID_STATE = valid_state()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=30,
)


# --- state decoding -----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(obj=json_values)
def test_from_obj_state_garbage(obj: Any) -> None:
    with pytest.raises(ConfigError) as e:
        state_json.from_obj_state(obj)
    assert names_state_key(str(e.value)), str(e.value)


@settings(max_examples=200, deadline=None)
@given(obj=st.dictionaries(st.sampled_from((*TOP_KEYS, "extra")), json_values, max_size=9))
def test_from_obj_state_garbage_top_level(obj: Any) -> None:
    with pytest.raises(ConfigError) as e:
        state_json.from_obj_state(obj)
    assert names_state_key(str(e.value)), str(e.value)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


STATE_PATHS = _paths(VALID_STATE)[1:]


def _mutate(obj: Any, path: tuple[Any, ...], how: str, value: Any) -> Any:
    obj = copy.deepcopy(obj)
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    if how == "delete":
        del parent[last]
    elif how == "replace":
        parent[last] = value
    elif how == "add" and isinstance(parent, dict):
        parent["zz_extra"] = value
    elif how == "add" and isinstance(parent, list):
        parent.append(value)
    elif how == "bump":
        old = parent[last]
        if isinstance(old, int) and not isinstance(old, bool):
            parent[last] = old + value if isinstance(value, int) and value else -1 - old
        elif isinstance(old, str):
            parent[last] = old[: len(old) // 2] + (value if isinstance(value, str) else "g")
        else:
            parent[last] = value
    return obj


mutations = st.tuples(
    st.sampled_from(STATE_PATHS),
    st.sampled_from(["delete", "replace", "add", "bump"]),
    json_values | st.sampled_from([2**64, 2**32, 2**16, 256, -1, "", "00", "Healthy", 0]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(muts=st.lists(mutations, min_size=1, max_size=3))
def test_from_obj_state_mutated(muts: list[tuple[tuple[Any, ...], str, Any]]) -> None:
    obj: Any = VALID_STATE
    for path, how, value in muts:
        try:
            obj = _mutate(obj, path, how, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path
    try:
        c = state_json.from_obj_state(obj)
    except ConfigError as e:
        assert names_state_key(str(e)), str(e)
        return
    # Decoded (optional keys may have been defaulted): encoding is then a fixed point.
    again = state_json.to_obj_state(c)
    assert state_json.to_obj_state(state_json.from_obj_state(again)) == again


def test_from_obj_state_valid_round_trip() -> None:
    c = state_json.from_obj_state(VALID_STATE)
    assert state_json.to_obj_state(c) == VALID_STATE
    assert (
        state_json.from_json(state_json.to_json(c)) == c
        or state_json.to_obj_state(state_json.from_json(state_json.to_json(c))) == VALID_STATE
    )


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ((), [], "$: expected an object"),
        (("run_state",), "Running", "run_state: 'Running' is not one of:"),
        (("progress", "step"), 2**32, "progress.step: 4294967296 is out of range for u32"),
        (("epoch_state", "rounds"), [], "epoch_state.rounds: expected 4 rounds"),
        (("epoch_state", "rounds_head"), 4, "epoch_state.rounds_head: out of range"),
        (("epoch_state", "clients", 0, "id", "signer"), "00", "epoch_state.clients[0].id.signer"),
        (("epoch_state", "clients", 0, "state"), "Gone", "epoch_state.clients[0].state"),
        (("config", "witness_nodes"), -1, "config.witness_nodes: -1 is out of range for u16"),
        (("model",), "LLM", "model: variant 'LLM' needs a value"),
        (("pending_pause",), 0, "pending_pause: expected true or false"),
    ],
)
def test_from_obj_state_messages(path: tuple[Any, ...], value: Any, message: str) -> None:
    obj = _mutate(VALID_STATE, path, "replace", value) if path else value
    with pytest.raises(ConfigError) as e:
        state_json.from_obj_state(obj)
    assert str(e.value).startswith(message), str(e.value)


def test_from_obj_state_bloom_and_witness_messages() -> None:
    obj = copy.deepcopy(VALID_STATE)
    rounds = obj["epoch_state"]["rounds"]
    r = next(i for i, x in enumerate(rounds) if x["witnesses"])
    rounds[r]["witnesses"][0]["participant_bloom"] = "00" * 10
    with pytest.raises(ConfigError, match=rf"^epoch_state.rounds\[{r}\].witnesses\[0\]"):
        state_json.from_obj_state(obj)
    obj = copy.deepcopy(VALID_STATE)
    obj["epoch_state"]["rounds"][0]["witnesses"] = [
        obj["epoch_state"]["rounds"][r]["witnesses"][0]
    ] * 33
    with pytest.raises(ConfigError, match=r"^epoch_state.rounds\[0\].witnesses: at most 32"):
        state_json.from_obj_state(obj)


def test_from_json_garbage() -> None:
    for text in ("", "{", "nul", "[1,", b"\xff\xfe", "1e999999"):
        with pytest.raises(ConfigError):
            state_json.from_json(text)


# --- run-config TOML ----------------------------------------------------------------------------


def load_toml(text: str) -> None:
    rc = run_config_from_obj(parse_toml(text))
    rc.check()


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_toml_random_text(text: str) -> None:
    try:
        load_toml(text)
    except ConfigError as e:
        assert names_config_key(str(e)), str(e)


toml_fragments = st.sampled_from(
    [
        "0",
        "-1",
        "1",
        "70000",
        "4294967296",
        "18446744073709551616",
        "1.5",
        "nan",
        "inf",
        '""',
        '"x"',
        "true",
        "[]",
        "[1, 2]",
        "{}",
        '{ Hub = { repo_id = "" } }',
        '"Ephemeral"',
        "1979-05-27",
        '"HfLlama"',
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, 200), st.sampled_from(["value", "delete", "dup", "rename"])),
        min_size=1,
        max_size=3,
    ),
    value=toml_fragments,
)
def test_toml_mutated_state(edits: list[tuple[int, str]], value: str) -> None:
    lines = TINY_STATE.splitlines()
    for pos, how in edits:
        i = pos % len(lines)
        line = lines[i]
        if how == "value" and "=" in line:
            lines[i] = line.split("=", 1)[0] + "= " + value
        elif how == "delete":
            del lines[i]
        elif how == "dup":
            lines.insert(i, line)
        elif how == "rename" and "=" in line:
            lines[i] = "x" + line
    try:
        load_toml("\n".join(lines))
    except ConfigError as e:
        assert names_config_key(str(e)), str(e)


def test_tiny_state_is_valid() -> None:
    load_toml(TINY_STATE)


# --- handlers -----------------------------------------------------------------------------------

U64 = st.integers(0, 2**64 - 1)
SMALL = st.integers(0, 12)
INDEX = SMALL | U64
IDENTITIES = st.sampled_from([sim_identity(i) for i in range(6)] + [sim_identity(999)])
blooms = st.builds(Bloom.empty, U64)
witnesses = st.builds(
    Witness,
    st.builds(WitnessProof, position=INDEX, index=INDEX, witness=st.booleans()),
    blooms,
    blooms,
)
committee_proofs = st.builds(
    CommitteeProof, st.sampled_from(list(Committee)), position=INDEX, index=INDEX
)
checkpoints = st.sampled_from(
    [
        EphemeralCheckpoint(),
        DummyCheckpoint(HubRepo(repo_id="d")),
        HubCheckpoint(HubRepo(repo_id="a/b", revision="r")),
        P2PCheckpoint(HubRepo(repo_id="a/b")),
        GcsCheckpoint(GcsRepo(bucket="b")),
        P2PGcsCheckpoint(GcsRepo(bucket="b", prefix="p")),
    ]
)
calls = st.one_of(
    st.tuples(st.just("tick"), st.integers(0, 30), st.none() | st.lists(IDENTITIES, max_size=8)),
    st.tuples(st.just("warmup_witness"), IDENTITIES, witnesses),
    st.tuples(st.just("witness"), IDENTITIES, witnesses),
    st.tuples(
        st.just("health_check"),
        IDENTITIES,
        st.lists(st.tuples(IDENTITIES, committee_proofs), max_size=3),
    ),
    st.tuples(st.just("checkpoint"), IDENTITIES, INDEX, checkpoints),
    st.tuples(st.just("withdraw"), INDEX),
    st.tuples(st.just("pause")),
    st.tuples(st.just("resume")),
)

PHASE_NAMES = [s.name for s in RS]
_CACHE: dict[str, Sim] = {}


def phase_copy(name: str) -> Sim:
    if name not in _CACHE:
        _CACHE[name] = phase(name)
    return copy.deepcopy(_CACHE[name])


def call(sim: Sim, c: tuple[Any, ...]) -> object:
    coord = sim.coord
    op = c[0]
    if op == "tick":
        sim.advance(c[1])
        return coord.tick(c[2], sim.now, sim.next_seed())
    if op == "warmup_witness":
        coord.warmup_witness(c[1], c[2], sim.now, sim.next_seed())
        return None
    if op == "witness":
        coord.witness(c[1], c[2], sim.now)
        return None
    if op == "health_check":
        return coord.health_check(c[1], c[2])
    if op == "checkpoint":
        return coord.checkpoint(c[1], c[2], c[3], sim.now)
    if op == "withdraw":
        coord.withdraw(c[1])
        return None
    if op == "pause":
        coord.pause(sim.now)
        return None
    coord.resume(sim.now)
    return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(PHASE_NAMES), seq=st.lists(calls, min_size=1, max_size=12))
def test_handlers_random_inputs(name: str, seq: list[tuple[Any, ...]]) -> None:
    sim = phase_copy(name)
    for c in seq:
        before = state_json.to_obj_state(sim.coord)
        try:
            call(sim, c)
        except CoordinatorException:
            assert state_json.to_obj_state(sim.coord) == before, (
                f"rejected {c[0]} changed the state"
            )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["RoundTrain", "RoundWitness", "Cooldown"]), proof=committee_proofs)
def test_health_check_random_proof_for_real_client(name: str, proof: CommitteeProof) -> None:
    sim = phase_copy(name)
    who: NodeIdentity = sim.coord.epoch_state.clients[0].id
    before = state_json.to_obj_state(sim.coord)
    try:
        sim.coord.health_check(who, [(sim.coord.epoch_state.clients[-1].id, proof)])
    except CoordinatorException:
        assert state_json.to_obj_state(sim.coord) == before


def test_config_is_unchecked_in_states() -> None:
    """from_obj_state does not apply CoordinatorConfig.check (vectors use crafted configs)."""
    obj = copy.deepcopy(VALID_STATE)
    obj["config"]["witness_nodes"] = 40
    c = state_json.from_obj_state(obj)
    assert isinstance(c.config, CoordinatorConfig) and c.config.witness_nodes == 40


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    muts=st.lists(mutations, min_size=1, max_size=3),
    seq=st.lists(calls, min_size=1, max_size=8),
)
def test_handlers_on_mutated_states(
    muts: list[tuple[tuple[Any, ...], str, Any]], seq: list[tuple[Any, ...]]
) -> None:
    """A decodable but inconsistent state (wrong clients_len, stale indices, odd heights...)
    still only yields CoordinatorException from every handler."""
    obj: Any = VALID_STATE
    for path, how, value in muts:
        try:
            obj = _mutate(obj, path, how, value)
        except (KeyError, IndexError, TypeError):
            continue
    try:
        coord = state_json.from_obj_state(obj)
    except ConfigError:
        return
    sim = Sim(coord)
    for c in seq:
        with contextlib.suppress(CoordinatorException):
            call(sim, c)
