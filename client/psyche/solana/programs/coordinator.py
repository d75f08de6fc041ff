"""A coordinator run's account as its creator builds it, shared by the two ways to create a run:
directly (:func:`psyche.solana.programs.coordinator_commands.create_run`) and through the
Treasurer (:func:`psyche.solana.programs.treasurer_commands.create_run_via_treasurer`). Kept apart
from both so that neither client imports the other (the coordinator's commands read Treasurer
runs; the Treasurer creates coordinator accounts).
"""

from __future__ import annotations

from typing import Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.system_program import CreateAccountParams, create_account

from psyche.solana.errors import ChainError
from psyche.solana.peer_record import rpcs_are_local
from psyche.solana.session import Session

__all__ = [
    "METADATA_DESCRIPTION_BYTES",
    "METADATA_NAME_BYTES",
    "create_coordinator_account_ix",
    "default_local_run",
    "metadata_arg",
]


METADATA_NAME_BYTES = 64
METADATA_DESCRIPTION_BYTES = 280


def metadata_arg(
    name: str = "", description: str = "", num_parameters: int = 0, vocab_size: int = 0
) -> dict[str, Any]:
    """The ``RunMetadata`` argument of ``update`` (NUL-padded fixed strings)."""
    fields = (
        ("name", name, METADATA_NAME_BYTES),
        ("description", description, METADATA_DESCRIPTION_BYTES),
    )
    out: dict[str, Any] = {}
    for key, text, size in fields:
        raw = text.encode()
        if len(raw) > size:
            raise ChainError(f"the run's {key} is {len(raw)} bytes; at most {size} fit on chain")
        out[key] = {"bytes": raw.ljust(size, b"\0")}
    return {**out, "num_parameters": num_parameters, "vocab_size": vocab_size}


async def create_coordinator_account_ix(s: Session, account: Keypair) -> Instruction:
    """The system ``create_account`` of a run's zero-copy coordinator account (the wallet pays
    its rent; owned by the coordinator program, checked by ``init_coordinator``'s ``zero``)."""
    size = s.layout.size
    return create_account(
        CreateAccountParams(
            from_pubkey=s.wallet.pubkey(),
            to_pubkey=account.pubkey(),
            lamports=await s.rpcs[0].minimum_balance(size),
            space=size,
            owner=s.coordinator.program_id,
        )
    )


def default_local_run(s: Session) -> bool:
    """A new run's ``local_run`` flag when its creator does not choose: local when every RPC
    endpoint of the session is on this machine or LAN (the chain's clients are there too)."""
    return rpcs_are_local(s.endpoints.rpc_urls)
