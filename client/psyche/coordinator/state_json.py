"""The coordinator's full state as a plain JSON object, and back.

This is the form of the shared test vectors (``tests/vectors/coordinator/``), which the Rust program
replays and compares field by field, and the form the centralized server sends to clients. Shapes
follow serde's defaults so the Rust side derives them: structs are objects in field order, unit
enums are their variant name, tagged enums are ``{"Variant": …}``; byte strings (identities, blooms)
are lowercase hex; a bloom is the hex of its 392-byte encoding; a ``BatchId`` is the pair
``[start, end]``. ``from_obj`` validates everything, because a client must never trust a state it
decodes.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import (
    MAX_CLIENTS,
    MAX_LOST_BATCHES,
    MAX_ROUND_RETRIES,
    MAX_WITNESSES,
    NUM_STORED_ROUNDS,
    Client,
    ClientState,
    EpochState,
    Progress,
    Round,
    RunState,
    Verdict,
    Witness,
)
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.coordinator_config import RUN_ID_MAX_LEN, CoordinatorConfig
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.model import Model
from psyche.protocol.strict_obj import U16, U32, U64, ConfigError, MaxBytes, from_obj, to_obj


def identity_obj(i: NodeIdentity) -> dict[str, str]:
    return {"signer": i.signer.hex(), "p2p_identity": i.p2p_identity.hex()}


def witness_obj(w: Witness) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "proof": {
            "position": w.proof.position,
            "index": w.proof.index,
            "witness": w.proof.witness,
        },
        "participant_bloom": w.participant_bloom.to_bytes().hex(),
        "broadcast_bloom": w.broadcast_bloom.to_bytes().hex(),
    }
    # Written only when present, so states without verification keep their exact form.
    if not w.verdict.empty:
        obj["verdict"] = {"checked": w.verdict.checked, "mismatch": w.verdict.mismatch}
    return obj


def batch_ids_obj(batches: list[BatchId]) -> list[list[int]]:
    return [[b.start, b.end] for b in batches]


def _client_obj(c: Client) -> dict[str, Any]:
    return {
        "id": identity_obj(c.id),
        "state": c.state.name,
        "exited_height": c.exited_height,
        "exited_index": c.exited_index,
    }


def to_obj_state(c: Coordinator) -> dict[str, Any]:
    es = c.epoch_state
    return {
        "run_id": c.run_id,
        "run_state": c.run_state.name,
        "config": to_obj(c.config),
        "model": to_obj(c.model),
        "progress": {
            "epoch": c.progress.epoch,
            "step": c.progress.step,
            "epoch_start_data_index": c.progress.epoch_start_data_index,
        },
        "epoch_state": {
            "rounds": [
                {
                    "witnesses": [witness_obj(w) for w in r.witnesses],
                    "data_index": r.data_index,
                    "random_seed": r.random_seed,
                    "height": r.height,
                    "clients_len": r.clients_len,
                    "tie_breaker_tasks": r.tie_breaker_tasks,
                    "retries": batch_ids_obj(r.retries),
                }
                for r in es.rounds
            ],
            "clients": [_client_obj(x) for x in es.clients],
            "exited_clients": [_client_obj(x) for x in es.exited_clients],
            "rounds_head": es.rounds_head,
            "start_step": es.start_step,
            "last_step": es.last_step,
            "start_timestamp": es.start_timestamp,
            "first_round": es.first_round,
            "cold_start_epoch": es.cold_start_epoch,
            "lost": batch_ids_obj(es.lost),
        },
        "run_state_start_unix_timestamp": c.run_state_start_unix_timestamp,
        "pending_pause": c.pending_pause,
    }


def to_json(c: Coordinator) -> str:
    return json.dumps(to_obj_state(c), separators=(",", ":"))


# --- decoding -----------------------------------------------------------------------------------


def _table(obj: Any, path: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: expected an object")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ConfigError(f"{path}.{missing[0]}: missing key")
    extra = [k for k in obj if k not in keys]
    if extra:
        raise ConfigError(f"{path}.{extra[0]}: unknown key")
    return obj


def _bytes(obj: Any, path: str, length: int) -> bytes:
    # A hex string decoded here directly, as from_obj(bytes, …) would: its generic dispatch was
    # most of a client's decode of every state it receives (two keys per client listed).
    try:
        data = bytes.fromhex(obj) if isinstance(obj, str) else None
    except ValueError:
        data = None
    if data is None:
        data = from_obj(bytes, obj, path)  # raises the error naming what is wrong
    if len(data) != length:
        raise ConfigError(f"{path}: expected {length} bytes, got {len(data)}")
    return data


def _identity(obj: Any, path: str) -> NodeIdentity:
    t = _table(obj, path, ("signer", "p2p_identity"))
    return NodeIdentity(
        _bytes(t["signer"], f"{path}.signer", 32),
        _bytes(t["p2p_identity"], f"{path}.p2p_identity", 32),
    )


def _bloom(obj: Any, path: str) -> Bloom:
    try:
        return Bloom.from_bytes(_bytes(obj, path, 8 + 8 * Bloom.WORDS))
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None


def _client(obj: Any, path: str) -> Client:
    t = _table(obj, path, ("id", "state", "exited_height", "exited_index"))
    return Client(
        id=_identity(t["id"], f"{path}.id"),
        state=from_obj(ClientState, t["state"], f"{path}.state"),
        exited_height=from_obj(U32, t["exited_height"], f"{path}.exited_height"),
        exited_index=from_obj(U16, t["exited_index"], f"{path}.exited_index"),
    )


def _list(obj: Any, path: str, limit: int) -> list[Any]:
    if not isinstance(obj, list):
        raise ConfigError(f"{path}: expected an array")
    if len(obj) > limit:
        raise ConfigError(f"{path}: at most {limit} entries, got {len(obj)}")
    return obj


def _witness(obj: Any, path: str) -> Witness:
    keys = ("proof", "participant_bloom", "broadcast_bloom")
    t = _table(
        obj, path, (*keys, "verdict") if isinstance(obj, dict) and "verdict" in obj else keys
    )
    p = _table(t["proof"], f"{path}.proof", ("position", "index", "witness"))
    return Witness(
        proof=WitnessProof(
            position=from_obj(U64, p["position"], f"{path}.proof.position"),
            index=from_obj(U64, p["index"], f"{path}.proof.index"),
            witness=from_obj(bool, p["witness"], f"{path}.proof.witness"),
        ),
        participant_bloom=_bloom(t["participant_bloom"], f"{path}.participant_bloom"),
        broadcast_bloom=_bloom(t["broadcast_bloom"], f"{path}.broadcast_bloom"),
        verdict=_verdict(t["verdict"], f"{path}.verdict") if "verdict" in t else Verdict(),
    )


def _verdict(obj: Any, path: str) -> Verdict:
    t = _table(obj, path, ("checked", "mismatch"))
    return Verdict(
        checked=from_obj(U16, t["checked"], f"{path}.checked"),
        mismatch=from_obj(U16, t["mismatch"], f"{path}.mismatch"),
    )


def _batch_ids(obj: Any, path: str, limit: int) -> list[BatchId]:
    out = []
    for i, b in enumerate(_list(obj, path, limit)):
        if not isinstance(b, list) or len(b) != 2:
            raise ConfigError(f"{path}[{i}]: expected [start, end]")
        start = from_obj(U64, b[0], f"{path}[{i}][0]")
        end = from_obj(U64, b[1], f"{path}[{i}][1]")
        if end < start:
            raise ConfigError(f"{path}[{i}]: end {end} is before start {start}")
        out.append(BatchId(start, end))
    return out


def _round(obj: Any, path: str) -> Round:
    keys = (
        "witnesses", "data_index", "random_seed", "height", "clients_len", "tie_breaker_tasks",
        "retries",
    )  # fmt: skip
    t = _table(obj, path, keys)
    ws = _list(t["witnesses"], f"{path}.witnesses", MAX_WITNESSES)
    return Round(
        witnesses=[_witness(w, f"{path}.witnesses[{i}]") for i, w in enumerate(ws)],
        data_index=from_obj(U64, t["data_index"], f"{path}.data_index"),
        random_seed=from_obj(U64, t["random_seed"], f"{path}.random_seed"),
        height=from_obj(U32, t["height"], f"{path}.height"),
        clients_len=from_obj(U16, t["clients_len"], f"{path}.clients_len"),
        tie_breaker_tasks=from_obj(U16, t["tie_breaker_tasks"], f"{path}.tie_breaker_tasks"),
        retries=_batch_ids(t["retries"], f"{path}.retries", MAX_ROUND_RETRIES),
    )


def from_obj_state(obj: Any) -> Coordinator:
    """Decode and validate a full state; raises ConfigError naming the bad field."""
    keys = (
        "run_id", "run_state", "config", "model", "progress", "epoch_state",
        "run_state_start_unix_timestamp", "pending_pause",
    )  # fmt: skip
    t = _table(obj, "$", keys)
    pr = _table(t["progress"], "progress", ("epoch", "step", "epoch_start_data_index"))
    ek = (
        "rounds", "clients", "exited_clients", "rounds_head", "start_step", "last_step",
        "start_timestamp", "first_round", "cold_start_epoch", "lost",
    )  # fmt: skip
    es = _table(t["epoch_state"], "epoch_state", ek)
    rounds = _list(es["rounds"], "epoch_state.rounds", NUM_STORED_ROUNDS)
    if len(rounds) != NUM_STORED_ROUNDS:
        raise ConfigError(f"epoch_state.rounds: expected {NUM_STORED_ROUNDS} rounds")
    head = from_obj(U32, es["rounds_head"], "epoch_state.rounds_head")
    if head >= NUM_STORED_ROUNDS:
        raise ConfigError("epoch_state.rounds_head: out of range")
    clients = _list(es["clients"], "epoch_state.clients", MAX_CLIENTS)
    exited = _list(es["exited_clients"], "epoch_state.exited_clients", MAX_CLIENTS)
    run_id = from_obj(Annotated[str, MaxBytes(RUN_ID_MAX_LEN)], t["run_id"], "run_id")
    return Coordinator(
        run_id=run_id,
        config=from_obj(CoordinatorConfig, t["config"], "config"),
        model=from_obj(Model, t["model"], "model"),
        run_state=from_obj(RunState, t["run_state"], "run_state"),
        progress=Progress(
            epoch=from_obj(U16, pr["epoch"], "progress.epoch"),
            step=from_obj(U32, pr["step"], "progress.step"),
            epoch_start_data_index=from_obj(
                U64, pr["epoch_start_data_index"], "progress.epoch_start_data_index"
            ),
        ),
        epoch_state=EpochState(
            rounds=[_round(r, f"epoch_state.rounds[{i}]") for i, r in enumerate(rounds)],
            clients=[_client(c, f"epoch_state.clients[{i}]") for i, c in enumerate(clients)],
            exited_clients=[
                _client(c, f"epoch_state.exited_clients[{i}]") for i, c in enumerate(exited)
            ],
            rounds_head=head,
            start_step=from_obj(U32, es["start_step"], "epoch_state.start_step"),
            last_step=from_obj(U32, es["last_step"], "epoch_state.last_step"),
            start_timestamp=from_obj(U64, es["start_timestamp"], "epoch_state.start_timestamp"),
            first_round=from_obj(bool, es["first_round"], "epoch_state.first_round"),
            cold_start_epoch=from_obj(bool, es["cold_start_epoch"], "epoch_state.cold_start_epoch"),
            lost=_batch_ids(es["lost"], "epoch_state.lost", MAX_LOST_BATCHES),
        ),
        run_state_start_unix_timestamp=from_obj(
            U64, t["run_state_start_unix_timestamp"], "run_state_start_unix_timestamp"
        ),
        pending_pause=from_obj(bool, t["pending_pause"], "pending_pause"),
    )


def from_json(text: str | bytes) -> Coordinator:
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ConfigError(f"coordinator state is not valid JSON: {e}") from None
    return from_obj_state(obj)
