"""Fakes for the Solana backend tests: a JSON account codec and JSON instructions.

They stand in for the IDL layout (tested on its own against the cross-language vectors) so the
backend's logic is tested independently of the byte layout. ``FakeCodec.encode`` is what the RPC
test double serves; ``decode_ix`` reads back what the backend sent.
"""

from __future__ import annotations

import json
from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from psyche.backends.base import HealthCheckEntries
from psyche.coordinator import Coordinator, Witness, WitnessMetadata
from psyche.coordinator.state_json import from_obj_state, identity_obj, to_obj_state, witness_obj
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint
from psyche.protocol.strict_obj import to_obj
from psyche.solana.snapshot import AccountLayoutError, RegisteredClient, RunSnapshot

PROGRAM = Pubkey.from_string("11111111111111111111111111111112")
ACCOUNT = Pubkey.from_string("CoordAcct1111111111111111111111111111111111")
AUTH = Pubkey.from_string("Auth111111111111111111111111111111111111111")


def encode(snap: RunSnapshot) -> bytes:
    return json.dumps(
        {
            "nonce": snap.nonce,
            "state": to_obj_state(snap.coordinator),
            "clients": [[identity_obj(c.id), c.active] for c in snap.clients],
            "next_active": snap.next_active,
            "client_version": snap.client_version,
        }
    ).encode()


def _identity(obj: dict[str, str]) -> NodeIdentity:
    return NodeIdentity(bytes.fromhex(obj["signer"]), bytes.fromhex(obj["p2p_identity"]))


class FakeCodec:
    def decode_account(self, data: bytes) -> RunSnapshot:
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise AccountLayoutError(f"not JSON: {e}") from None
        return RunSnapshot(
            nonce=obj["nonce"],
            coordinator=from_obj_state(obj["state"]),
            clients=[RegisteredClient(_identity(i), a) for i, a in obj["clients"]],
            next_active=obj["next_active"],
            client_version=obj["client_version"],
        )


def _ix(name: str, user: Pubkey, args: dict[str, Any], *extra: Pubkey) -> Instruction:
    metas = [AccountMeta(user, True, False), AccountMeta(ACCOUNT, False, True)]
    metas += [AccountMeta(k, False, False) for k in extra]
    return Instruction(PROGRAM, json.dumps({"ix": name, **args}).encode(), metas)


class FakeInstructions:
    def join_run(self, user: Pubkey, client_id: NodeIdentity, authorization: Pubkey) -> Instruction:
        return _ix("join_run", user, {"client_id": identity_obj(client_id)}, authorization)

    def tick(self, user: Pubkey) -> Instruction:
        return _ix("tick", user, {})

    def witness(self, user: Pubkey, witness: Witness, metadata: WitnessMetadata) -> Instruction:
        return _ix("witness", user, {"witness": witness_obj(witness), "step": metadata.step})

    def warmup_witness(self, user: Pubkey, witness: Witness) -> Instruction:
        return _ix("warmup_witness", user, {"witness": witness_obj(witness)})

    def health_check(self, user: Pubkey, checks: HealthCheckEntries) -> list[Instruction]:
        return [
            _ix("health_check", user, {"id": identity_obj(i), "index": p.index}) for i, p in checks
        ]

    def checkpoint(self, user: Pubkey, index: int, checkpoint: Checkpoint) -> Instruction:
        return _ix("checkpoint", user, {"index": index, "checkpoint": to_obj(checkpoint)})


def decode_ix(tx: Transaction) -> tuple[dict[str, Any], list[Pubkey], Pubkey]:
    """(args, account keys, fee payer/signer) of a one-instruction transaction."""
    msg = tx.message
    (cix,) = msg.instructions
    keys = [msg.account_keys[i] for i in cix.accounts]
    return json.loads(bytes(cix.data)), keys, msg.account_keys[0]


def snapshot(coord: Coordinator, nonce: int, **kw: Any) -> RunSnapshot:
    return RunSnapshot(nonce=nonce, coordinator=coord.clone(), **kw)
