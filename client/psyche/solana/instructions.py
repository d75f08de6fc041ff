"""Instructions of the coordinator and authorizer programs, built from their IDLs.

:class:`ProgramClient` turns ``(instruction name, args, named accounts)`` into a solders
``Instruction``: the discriminator, borsh arguments and account order, signer and writable flags
all come from the IDL, so only the *meaning* of each account is written here. An instruction whose
IDL takes a single ``params`` struct gets its arguments wrapped into it, so both Anchor styles
work. :class:`RunInstructions` binds one run's accounts and implements the client's
:class:`~psyche.solana.snapshot.ClientInstructions`, plus the wallet's peer record
(``set_peer_addrs``, ``close_peer_record``; the account is read by
:mod:`psyche.solana.peer_record`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey

from psyche.coordinator import Witness, WitnessMetadata
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import CommitteeProof
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint
from psyche.protocol.strict_obj import to_obj
from psyche.solana.idl import IdlCodec, IdlError

__all__ = [
    "COORDINATOR_SEED",
    "JOIN_RUN_SCOPE",
    "PEER_RECORD_SEED",
    "ProgramClient",
    "RunInstructions",
    "authorization_pda",
    "bloom_dict",
    "default_idl_dir",
    "instance_pda",
    "peer_record_pda",
]

COORDINATOR_SEED = b"coordinator"
AUTHORIZATION_SEED = b"Authorization"
JOIN_RUN_SCOPE = b"CoordinatorJoinRun"
PEER_RECORD_SEED = b"peer"
SYSTEM_PROGRAM = Pubkey.from_string("11111111111111111111111111111111")
MAX_HEALTH_CHECKS_PER_INSTRUCTION = 8


def default_idl_dir() -> Path:
    """``idl/`` at the repository root (this file is client/psyche/solana/...)."""
    return Path(__file__).resolve().parents[3] / "idl"


def instance_pda(program: Pubkey, run_id: str) -> Pubkey:
    return Pubkey.find_program_address([COORDINATOR_SEED, run_id.encode()], program)[0]


def peer_record_pda(program: Pubkey, coordinator_instance: Pubkey, signer: Pubkey) -> Pubkey:
    """The ``PeerRecord`` of ``signer`` for the run of ``coordinator_instance``:
    ``["peer", coordinator_instance, signer]``."""
    seeds = [PEER_RECORD_SEED, bytes(coordinator_instance), bytes(signer)]
    return Pubkey.find_program_address(seeds, program)[0]


def authorization_pda(program: Pubkey, grantor: Pubkey, grantee: Pubkey, scope: bytes) -> Pubkey:
    seeds = [AUTHORIZATION_SEED, bytes(grantor), bytes(grantee), scope]
    return Pubkey.find_program_address(seeds, program)[0]


class ProgramClient:
    """One program: its id and its IDL codec."""

    def __init__(self, idl: IdlCodec, program_id: Pubkey | None = None) -> None:
        self.idl = idl
        if program_id is None:
            if not idl.address:
                raise IdlError("the IDL has no address; pass the program id")
            program_id = Pubkey.from_string(idl.address)
        self.program_id = program_id

    def args(self, name: str, values: Mapping[str, Any]) -> dict[str, Any]:
        ix = self.idl.instruction(name)
        names = [a for a, _ in ix.args]
        if names == ["params"] and "params" not in values:
            return {"params": dict(values)}
        return dict(values)

    def build(
        self, name: str, args: Mapping[str, Any], accounts: Mapping[str, Pubkey]
    ) -> Instruction:
        ix = self.idl.instruction(name)
        metas = []
        for acc in ix.accounts:
            key = accounts.get(acc.name)
            if key is None and acc.address is not None:
                key = Pubkey.from_string(acc.address)
            if key is None and acc.name == "system_program":
                key = SYSTEM_PROGRAM
            if key is None:
                if acc.optional:
                    key = self.program_id  # Anchor's "None" for an optional account
                else:
                    raise IdlError(f"{name}: no value for account {acc.name!r}")
            metas.append(AccountMeta(key, acc.signer, acc.writable))
        data = self.idl.instruction_data(name, self.args(name, args))
        return Instruction(self.program_id, data, metas)


# The bloom as the IDL codec holds it (seed, then words), the shape both accounts and the witness
# instruction's argument use.
_BLOOM = struct.Struct(f"<Q{Bloom.WORDS}Q")


def bloom_dict(b: Bloom) -> dict[str, Any]:
    seed, *words = _BLOOM.unpack(b.to_bytes())
    return {"seed": seed, "words": words}


def identity_value(i: NodeIdentity) -> dict[str, bytes]:
    return {"signer": i.signer, "p2p_identity": i.p2p_identity}


def witness_value(w: Witness) -> dict[str, Any]:
    return {
        "proof": {"position": w.proof.position, "index": w.proof.index, "witness": w.proof.witness},
        "participant_bloom": bloom_dict(w.participant_bloom),
        "broadcast_bloom": bloom_dict(w.broadcast_bloom),
    }


def metadata_value(m: WitnessMetadata) -> dict[str, Any]:
    import math

    def f(x: float) -> float:
        return x if math.isfinite(x) else 0.0

    return {
        "step": m.step,
        "tokens_per_sec": f(m.tokens_per_sec),
        "bandwidth_per_sec": f(m.bandwidth_per_sec),
        "loss": f(m.loss),
        "efficiency": f(m.efficiency),
        "evals": [{"task": e.task, "value": f(e.value)} for e in m.evals],
    }


@dataclass(frozen=True, slots=True)
class RunAccounts:
    instance: Pubkey
    account: Pubkey


class RunInstructions:
    """The coordinator instructions of one run (``ClientInstructions`` and the admin ones)."""

    def __init__(self, program: ProgramClient, run: RunAccounts) -> None:
        self.p = program
        self.run = run

    def _accounts(self, **signers: Pubkey) -> dict[str, Pubkey]:
        return {
            "coordinator_instance": self.run.instance,
            "coordinator_account": self.run.account,
            **signers,
        }

    def _client(
        self, name: str, user: Pubkey, args: Mapping[str, Any], **more: Pubkey
    ) -> Instruction:
        return self.p.build(name, args, self._accounts(user=user, **more))

    # --- ClientInstructions ---------------------------------------------------------------------

    def join_run(self, user: Pubkey, client_id: NodeIdentity, authorization: Pubkey) -> Instruction:
        args = {"client_id": identity_value(client_id)}
        return self._client("join_run", user, args, authorization=authorization)

    def tick(self, user: Pubkey) -> Instruction:
        return self._client("tick", user, {})

    def witness(self, user: Pubkey, witness: Witness, metadata: WitnessMetadata) -> Instruction:
        # The verdict rides only on round witnesses: warmup has no results to verify.
        verdict = {"checked": witness.verdict.checked, "mismatch": witness.verdict.mismatch}
        args = {**witness_value(witness), "verdict": verdict, "metadata": metadata_value(metadata)}
        return self._client("witness", user, args)

    def warmup_witness(self, user: Pubkey, witness: Witness) -> Instruction:
        return self._client("warmup_witness", user, witness_value(witness))

    def health_check(
        self, user: Pubkey, checks: Sequence[tuple[NodeIdentity, CommitteeProof]]
    ) -> list[Instruction]:
        out = []
        for i in range(0, len(checks), MAX_HEALTH_CHECKS_PER_INSTRUCTION):
            chunk = checks[i : i + MAX_HEALTH_CHECKS_PER_INSTRUCTION]
            entries = [
                {
                    "id": identity_value(who),
                    "proof": {
                        "committee": proof.committee.name,
                        "position": proof.position,
                        "index": proof.index,
                    },
                }
                for who, proof in chunk
            ]
            out.append(self._client("health_check", user, {"checks": entries}))
        return out

    def checkpoint(self, user: Pubkey, index: int, checkpoint: Checkpoint) -> Instruction:
        # The program finds the signer's index itself; ``index`` is for the centralized server.
        return self._client("checkpoint", user, {"checkpoint": to_obj(checkpoint)})

    # --- the wallet's peer record -------------------------------------------------------------

    def peer_record(self, user: Pubkey) -> Pubkey:
        """The address of ``user``'s peer record for this run."""
        return peer_record_pda(self.p.program_id, self.run.instance, user)

    def set_peer_addrs(self, user: Pubkey, addrs: Sequence[str]) -> Instruction:
        """``user`` publishes ``addrs`` (0 to 4 multiaddrs) for this run, creating its record on
        first use (``user`` pays the rent, about 0.0052 SOL, back on close). The addresses are
        not checked here: call :func:`psyche.solana.peer_record.check_peer_addrs` first
        to fail before sending, or the program refuses them with a named error."""
        if isinstance(addrs, str):
            raise TypeError("addrs is a sequence of multiaddr strings, not one string")
        accounts = {
            "signer": user,
            "coordinator_instance": self.run.instance,
            "peer_record": self.peer_record(user),
        }
        return self.p.build("set_peer_addrs", {"addrs": list(addrs)}, accounts)

    def close_peer_record(self, user: Pubkey) -> Instruction:
        """``user`` closes its peer record for this run; the rent goes back to ``user``."""
        accounts = {"signer": user, "peer_record": self.peer_record(user)}
        return self.p.build("close_peer_record", {}, accounts)

    # --- run administration ---------------------------------------------------------------------

    def init_coordinator(
        self,
        payer: Pubkey,
        main_authority: Pubkey,
        join_authority: Pubkey,
        run_id: str,
        client_version: str,
        local_run: bool = False,
    ) -> Instruction:
        args = {
            "main_authority": main_authority,
            "join_authority": join_authority,
            "run_id": run_id,
            "client_version": client_version,
            "local_run": local_run,
        }
        return self.p.build("init_coordinator", args, self._accounts(payer=payer))

    def owner(
        self, name: str, authority: Pubkey, args: Mapping[str, Any], **more: Pubkey
    ) -> Instruction:
        return self.p.build(name, args, self._accounts(authority=authority, **more))
