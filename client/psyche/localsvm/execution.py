"""One transaction's outcome on LiteSVM, as the RPC fronts report it: the :class:`Execution`
record, LiteSVM's transaction metadata in a validator's JSON shapes (inner instructions, return
data), and the blockhash swap a simulation may ask for (``replaceRecentBlockhash``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import base58
from solders.account import Account
from solders.hash import Hash
from solders.message import Message, MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from solders.transaction_metadata import FailedTransactionMetadata, TransactionMetadata

from psyche.localsvm.errors import TxErr

__all__ = ["Execution", "failure", "meta_fields", "with_blockhash"]


@dataclass(frozen=True, slots=True)
class Execution:
    """The outcome of processing or simulating one transaction."""

    signature: Signature
    err: TxErr
    slot: int
    logs: tuple[str, ...] = ()
    units: int = 0
    fee: int = 0
    committed: bool = False
    inner_instructions: tuple[dict[str, Any], ...] = ()
    return_data: dict[str, Any] | None = None
    post_accounts: Mapping[Pubkey, Account] = field(default_factory=dict)
    replacement_blockhash: Hash | None = None
    pre_balances: tuple[int, ...] | None = None
    """Lamports of the message's keys before and after, where it was executed (a simulation
    that stopped before execution reports none, as a validator's does)."""
    post_balances: tuple[int, ...] | None = None
    loaded_data_size: int = 0
    """Bytes of account data the execution loaded (the keys' data; programs' ELFs not counted)."""

    @property
    def ok(self) -> bool:
        return self.err is None


def meta_fields(meta: TransactionMetadata) -> dict[str, Any]:
    inner = []
    for index, ixs in enumerate(meta.inner_instructions()):
        if ixs:
            inner.append(
                {
                    "index": index,
                    "instructions": [
                        {
                            "programIdIndex": ii.instruction().program_id_index,
                            "accounts": list(bytes(ii.instruction().accounts)),
                            "data": base58.b58encode(bytes(ii.instruction().data)).decode(),
                            "stackHeight": ii.stack_height(),  # type: ignore[attr-defined]  # stub lacks it
                        }
                        for ii in ixs
                    ],
                }
            )
    # solders 0.26 names it ``return_data`` at run time, ``transaction_return_data`` in its stub.
    rd = getattr(meta, "return_data")()  # noqa: B009
    data = bytes(rd.data)
    return_data = (
        {"programId": str(rd.program_id), "data": [base64.b64encode(data).decode(), "base64"]}
        if data
        else None
    )
    return {
        "logs": tuple(meta.logs()),
        "units": meta.compute_units_consumed(),
        "inner_instructions": tuple(inner),
        "return_data": return_data,
    }


def failure(res: FailedTransactionMetadata) -> tuple[TxErr, dict[str, Any]]:
    err = json.loads(res.to_json())["err"]
    return err, meta_fields(res.meta())


def with_blockhash(tx: VersionedTransaction, blockhash: Hash) -> VersionedTransaction:
    """``tx`` naming ``blockhash`` instead (its signatures no longer match: simulation only)."""
    msg = tx.message
    new: Message | MessageV0
    if isinstance(msg, MessageV0):
        new = MessageV0(
            msg.header, msg.account_keys, blockhash, msg.instructions, msg.address_table_lookups
        )
    else:
        h = msg.header
        new = Message.new_with_compiled_instructions(
            h.num_required_signatures,
            h.num_readonly_signed_accounts,
            h.num_readonly_unsigned_accounts,
            msg.account_keys,
            blockhash,
            msg.instructions,
        )
    return VersionedTransaction.populate(new, tx.signatures)
