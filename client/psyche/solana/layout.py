"""The coordinator account, read and written through the committed IDL (``idl/*.json``).

:class:`CoordinatorLayout` decodes ``CoordinatorAccount`` (zero-copy, ~170 KB) with the
IDL-driven codec of :mod:`psyche.solana.idl` into the same Python
:class:`~psyche.coordinator.Coordinator` the centralized backend uses, by way of the serde object
form (:func:`psyche.coordinator.state_json.from_obj_state`), which validates every value: a client
never trusts bytes it decodes. The ``Model`` is a bounded borsh blob inside the account, decoded
with the IDL's ``Model`` type. Names below are the Rust field names (programs/psyche-coordinator:
``core/types.rs``, ``state/*.rs``); counts (``num_*``) cut the fixed arrays; ``_pad*`` fields are
ignored on reading and zero on writing. ``encode_account`` is the inverse, used by tests and the
RPC test double to serve account bytes.
"""

from __future__ import annotations

import struct
from typing import Any

from psyche.coordinator import Coordinator, EpochState, Round, RunState
from psyche.coordinator.state_json import from_obj_state, to_obj_state
from psyche.protocol.bloom import Bloom
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.model import Model
from psyche.protocol.strict_obj import ConfigError, to_obj
from psyche.solana.idl import IdlCodec, IdlError
from psyche.solana.instructions import bloom_dict
from psyche.solana.snapshot import AccountLayoutError, RegisteredClient, RunSnapshot

__all__ = ["ACCOUNT_VERSION", "CoordinatorLayout", "fixed_str", "model_from_obj_idl"]

ACCOUNT = "CoordinatorAccount"
ACCOUNT_VERSION = 2
_BLOOM = struct.Struct(f"<Q{Bloom.WORDS}Q")


def fixed_str(raw: bytes) -> str:
    """A NUL-padded FixedString's text."""
    try:
        return raw.split(b"\0", 1)[0].decode()
    except UnicodeDecodeError as e:
        raise AccountLayoutError(f"a stored string is not UTF-8: {e}") from None


def _fixed(text: str, size: int) -> dict[str, bytes]:
    raw = text.encode()
    if len(raw) > size:
        raise AccountLayoutError(f"{text!r} is longer than {size} bytes")
    return {"bytes": raw.ljust(size, b"\0")}


def _public(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


def _bytes_to_lists(obj: Any) -> Any:
    """IDL values → serde form: byte arrays inside the Model (a shuffle seed) become int lists."""
    if isinstance(obj, bytes):
        return list(obj)
    if isinstance(obj, dict):
        return {k: _bytes_to_lists(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_bytes_to_lists(v) for v in obj]
    return obj


def model_from_obj_idl(value: Any) -> Any:
    """The serde object of a ``Model`` decoded from borsh with the IDL."""
    return _bytes_to_lists(value)


class CoordinatorLayout:
    """``CoordinatorCodec`` for the real program, from its IDL."""

    def __init__(self, idl: IdlCodec) -> None:
        self.idl = idl
        self.size = idl.account_size(ACCOUNT)
        blob = idl.types["ModelBlob"]["type"]["fields"]
        self.model_capacity = int(next(f for f in blob if f["name"] == "bytes")["type"]["array"][1])

    # --- bytes → snapshot -----------------------------------------------------------------------

    def decode_account(self, data: bytes) -> RunSnapshot:
        if len(data) != self.size:
            raise AccountLayoutError(
                f"coordinator account is {len(data)} bytes, expected {self.size}"
            )
        try:
            d = self.idl.decode_account(ACCOUNT, data)
        except (IdlError, struct.error) as e:
            raise AccountLayoutError(str(e)) from None
        if d["version"] != ACCOUNT_VERSION:
            raise AccountLayoutError(
                f"coordinator account version {d['version']}, this client reads {ACCOUNT_VERSION}"
            )
        st = d["state"]
        try:
            obj = self._coordinator_obj(st["coordinator"])
            if obj["model"] is None:
                raise AccountLayoutError(
                    "the run has no model yet: it was created but never configured (`update`)"
                )
            coord = from_obj_state(obj)
        except (ConfigError, ValueError, KeyError) as e:
            raise AccountLayoutError(f"invalid coordinator state: {e}") from None
        cs = st["clients_state"]
        clients = [
            RegisteredClient(
                NodeIdentity(c["id"]["signer"], c["id"]["p2p_identity"]),
                c["active"],
                c["earned"],
                c["slashed"],
            )
            for c in cs["clients"][: cs["num_clients"]]
        ]
        meta = st["metadata"]
        return RunSnapshot(
            nonce=d["nonce"],
            coordinator=coord,
            clients=clients,
            next_active=cs["next_active"],
            client_version=fixed_str(st["client_version"]["bytes"]),
            extra={
                "metadata": {
                    "name": fixed_str(meta["name"]["bytes"]),
                    "description": fixed_str(meta["description"]["bytes"]),
                    "num_parameters": meta["num_parameters"],
                    "vocab_size": meta["vocab_size"],
                },
                "current_epoch_rates": cs["current_epoch_rates"],
                "future_epoch_rates": cs["future_epoch_rates"],
                "is_warmup_first_tick": st["is_warmup_first_tick"],
                "is_training_first_tick": st["is_training_first_tick"],
            },
        )

    def _coordinator_obj(self, c: dict[str, Any]) -> dict[str, Any]:
        es = c["epoch_state"]
        blob = c["model"]
        if blob["len"] > self.model_capacity:
            raise AccountLayoutError(f"model blob length {blob['len']} exceeds its capacity")
        # An empty blob is a run that was never configured: its State form has "model": null,
        # as the program writes it (tests/vectors/solana/accounts/01_initialized.json).
        model = None
        if blob["len"]:
            try:
                model = model_from_obj_idl(self.idl.decode("Model", blob["bytes"][: blob["len"]]))
            except (IdlError, IndexError, struct.error, UnicodeDecodeError) as e:
                raise AccountLayoutError(f"invalid model blob: {e}") from None
        try:
            state = RunState(c["run_state"]).name
        except ValueError:
            raise AccountLayoutError(f"invalid run_state tag {c['run_state']}") from None
        if es["num_clients"] > 256 or es["num_exited_clients"] > 256:
            raise AccountLayoutError("client count out of range")
        if es["num_lost"] > len(es["lost"]):
            raise AccountLayoutError(f"num_lost {es['num_lost']} out of range")
        return {
            "run_id": fixed_str(c["run_id"]["bytes"]),
            "run_state": state,
            "config": _public(c["config"]),
            "model": model,
            "progress": _public(c["progress"]),
            "epoch_state": {
                "rounds": [self._round_obj(r) for r in es["rounds"]],
                "clients": [_client_obj(x) for x in es["clients"][: es["num_clients"]]],
                "exited_clients": [
                    _client_obj(x) for x in es["exited_clients"][: es["num_exited_clients"]]
                ],
                "rounds_head": es["rounds_head"],
                "start_step": es["start_step"],
                "last_step": es["last_step"],
                "start_timestamp": es["start_timestamp"],
                "first_round": _flag(es["first_round"]),
                "cold_start_epoch": _flag(es["cold_start_epoch"]),
                "lost": [[b["start"], b["end"]] for b in es["lost"][: es["num_lost"]]],
            },
            "run_state_start_unix_timestamp": c["run_state_start_unix_timestamp"],
            "pending_pause": _flag(c["pending_pause"]),
        }

    @staticmethod
    def _round_obj(r: dict[str, Any]) -> dict[str, Any]:
        if r["num_witnesses"] > len(r["witnesses"]):
            raise AccountLayoutError(f"num_witnesses {r['num_witnesses']} out of range")
        if r["num_retries"] > len(r["retries"]):
            raise AccountLayoutError(f"num_retries {r['num_retries']} out of range")
        return {
            "witnesses": [_witness_obj(w) for w in r["witnesses"][: r["num_witnesses"]]],
            "data_index": r["data_index"],
            "random_seed": r["random_seed"],
            "height": r["height"],
            "clients_len": r["clients_len"],
            "tie_breaker_tasks": r["tie_breaker_tasks"],
            "retries": [[b["start"], b["end"]] for b in r["retries"][: r["num_retries"]]],
        }

    # --- snapshot → bytes (tests, RPC test double) ----------------------------------------------

    def encode_model(self, model: Model) -> bytes:
        return self.idl.encode("Model", to_obj(model))

    def encode_account(self, snap: RunSnapshot, *, version: int = ACCOUNT_VERSION) -> bytes:
        value = self._zero("CoordinatorAccount")
        value["version"], value["nonce"] = version, snap.nonce
        st = value["state"]
        self._fill_coordinator(st["coordinator"], snap.coordinator)
        cs = st["clients_state"]
        for i, rc in enumerate(snap.clients):
            cs["clients"][i] = {
                "id": {"signer": rc.id.signer, "p2p_identity": rc.id.p2p_identity},
                "earned": rc.earned,
                "slashed": rc.slashed,
                "active": rc.active,
            }
        cs["num_clients"], cs["next_active"] = len(snap.clients), snap.next_active
        st["client_version"] = _fixed(snap.client_version, 96)
        meta = snap.extra.get("metadata")
        if isinstance(meta, dict):
            st["metadata"] = {
                "name": _fixed(meta["name"], 64),
                "description": _fixed(meta["description"], 280),
                "num_parameters": meta["num_parameters"],
                "vocab_size": meta["vocab_size"],
            }
        return self.idl.encode_account(ACCOUNT, value)

    def _fill_coordinator(self, c: dict[str, Any], coord: Coordinator) -> None:
        obj = to_obj_state(coord)
        c["run_id"] = _fixed(coord.run_id, 32)
        c["config"].update(obj["config"])
        c["progress"].update(obj["progress"])
        c["run_state_start_unix_timestamp"] = coord.run_state_start_unix_timestamp
        c["run_state"] = coord.run_state.value
        c["pending_pause"] = int(coord.pending_pause)
        blob = self.encode_model(coord.model)
        if len(blob) > self.model_capacity:
            raise AccountLayoutError(f"the model needs {len(blob)} bytes, the blob holds fewer")
        c["model"]["len"] = len(blob)
        c["model"]["bytes"] = blob.ljust(self.model_capacity, b"\0")
        _fill_epoch_state(c["epoch_state"], coord.epoch_state)

    def _zero(self, name: str) -> Any:
        """The all-zero value of a fixed-size IDL type (as :meth:`IdlCodec.decode` shapes it)."""
        size = self.idl.size_of({"defined": {"name": name}})
        assert size is not None
        return self.idl.decode(name, bytes(size))


def _fill_epoch_state(es: dict[str, Any], pes: EpochState) -> None:
    """Write ``pes`` into the account's zeroed ``epoch_state`` (fixed arrays cut by counts)."""
    for r, pr in zip(es["rounds"], pes.rounds, strict=True):
        _fill_round(r, pr)
    for key, items in (("clients", pes.clients), ("exited_clients", pes.exited_clients)):
        for i, pc in enumerate(items):
            es[key][i] = {
                "id": {"signer": pc.id.signer, "p2p_identity": pc.id.p2p_identity},
                "exited_height": pc.exited_height,
                "exited_index": pc.exited_index,
                "state": pc.state.value,
                "_pad": bytes(1),
            }
    es.update(
        num_clients=len(pes.clients),
        num_exited_clients=len(pes.exited_clients),
        start_timestamp=pes.start_timestamp,
        rounds_head=pes.rounds_head,
        start_step=pes.start_step,
        last_step=pes.last_step,
        first_round=int(pes.first_round),
        cold_start_epoch=int(pes.cold_start_epoch),
        num_lost=len(pes.lost),
    )
    for i, b in enumerate(pes.lost):
        es["lost"][i] = {"start": b.start, "end": b.end}


def _fill_round(r: dict[str, Any], pr: Round) -> None:
    """Write one round, its retried intervals and its witnesses into the account's ``r``."""
    r.update(
        data_index=pr.data_index,
        random_seed=pr.random_seed,
        height=pr.height,
        clients_len=pr.clients_len,
        tie_breaker_tasks=pr.tie_breaker_tasks,
        num_witnesses=len(pr.witnesses),
        num_retries=len(pr.retries),
    )
    for i, b in enumerate(pr.retries):
        r["retries"][i] = {"start": b.start, "end": b.end}
    for i, w in enumerate(pr.witnesses):
        r["witnesses"][i] = {
            "proof": {
                "position": w.proof.position,
                "index": w.proof.index,
                "witness": int(w.proof.witness),
                "_pad": bytes(1),
                "verdict": {"checked": w.verdict.checked, "mismatch": w.verdict.mismatch},
                "_pad2": bytes(2),
            },
            "participant_bloom": bloom_dict(w.participant_bloom),
            "broadcast_bloom": bloom_dict(w.broadcast_bloom),
        }


def _flag(v: int) -> bool:
    if v not in (0, 1):
        raise AccountLayoutError(f"a stored flag is {v}, not 0 or 1")
    return v == 1


def _client_obj(x: dict[str, Any]) -> dict[str, Any]:
    from psyche.coordinator import ClientState

    try:
        state = ClientState(x["state"]).name
    except ValueError:
        raise AccountLayoutError(f"invalid client state tag {x['state']}") from None
    return {
        "id": {"signer": x["id"]["signer"].hex(), "p2p_identity": x["id"]["p2p_identity"].hex()},
        "state": state,
        "exited_height": x["exited_height"],
        "exited_index": x["exited_index"],
    }


def _witness_obj(w: dict[str, Any]) -> dict[str, Any]:
    proof = w["proof"]
    obj = {
        "proof": {
            "position": proof["position"],
            "index": proof["index"],
            "witness": _flag(proof["witness"]),
        },
        "participant_bloom": _bloom_hex(w["participant_bloom"]),
        "broadcast_bloom": _bloom_hex(w["broadcast_bloom"]),
    }
    # The serde form writes a verdict only when it is not empty.
    verdict = proof["verdict"]
    if verdict["checked"] or verdict["mismatch"]:
        obj["verdict"] = {"checked": verdict["checked"], "mismatch": verdict["mismatch"]}
    return obj


def _bloom_hex(b: dict[str, Any]) -> str:
    return _BLOOM.pack(b["seed"], *b["words"]).hex()
