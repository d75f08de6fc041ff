"""Transactions in a validator's JSON shapes: ``getTransaction``'s answer for a committed
transaction, a signature's status (``getSignatureStatuses``) and a simulation's value
(``simulateTransaction``, and the data of a failed preflight). The methods that parse the
requests and call the chain are in :mod:`psyche.localsvm.jsonrpc`.
"""

from __future__ import annotations

import base64
from typing import Any

import base58
from solders.message import MessageV0
from solders.transaction import VersionedTransaction

from psyche.localsvm.execution import Execution
from psyche.localsvm.history import TxRecord

__all__ = [
    "FINALITY_DEPTH",
    "STATUS_CACHE_SLOTS",
    "confirmed_transaction",
    "signature_status",
    "simulation_value",
]

FINALITY_DEPTH = 32
"""Slots after which a validator's transaction status turns ``finalized`` (max lockout)."""
STATUS_CACHE_SLOTS = 300


def _status(err: Any) -> dict[str, Any]:
    return {"Ok": None} if err is None else {"Err": err}


def _ui_message(tx: VersionedTransaction) -> dict[str, Any]:
    msg = tx.message
    h = msg.header
    out: dict[str, Any] = {
        "accountKeys": [str(k) for k in msg.account_keys],
        "header": {
            "numReadonlySignedAccounts": h.num_readonly_signed_accounts,
            "numReadonlyUnsignedAccounts": h.num_readonly_unsigned_accounts,
            "numRequiredSignatures": h.num_required_signatures,
        },
        "instructions": [
            {
                "accounts": list(bytes(ix.accounts)),
                "data": base58.b58encode(bytes(ix.data)).decode(),
                "programIdIndex": ix.program_id_index,
                # A validator (agave 4.2) reports 1 for the message's own instructions.
                "stackHeight": 1,
            }
            for ix in msg.instructions
        ],
        "recentBlockhash": str(msg.recent_blockhash),
    }
    if isinstance(msg, MessageV0):
        out["addressTableLookups"] = [
            {
                "accountKey": str(lookup.account_key),
                "writableIndexes": list(lookup.writable_indexes),
                "readonlyIndexes": list(lookup.readonly_indexes),
            }
            for lookup in msg.address_table_lookups
        ]
    return out


def simulation_value(
    ex: Execution,
    accounts: list[Any] | None,
    inner: bool,
    last_valid_block_height: int,
    *,
    preflight: bool = False,
) -> dict[str, Any]:
    """A simulation's ``value``: ``simulateTransaction``'s answer, and a failed preflight's data."""
    replacement = None
    if ex.replacement_blockhash is not None:
        replacement = {
            "blockhash": str(ex.replacement_blockhash),
            "lastValidBlockHeight": last_valid_block_height,
        }
    executed = ex.pre_balances is not None
    return {
        "accounts": accounts,
        "err": ex.err,
        "fee": ex.fee if executed else None,
        "innerInstructions": list(ex.inner_instructions) if inner else None,
        "loadedAccountsDataSize": ex.loaded_data_size,
        # agave 4.2: null in a preflight that stopped before execution, else always there.
        "loadedAddresses": {"readonly": [], "writable": []} if executed or not preflight else None,
        "logs": list(ex.logs),
        "postBalances": list(ex.post_balances) if ex.post_balances is not None else None,
        "postTokenBalances": [] if executed else None,
        "preBalances": list(ex.pre_balances) if ex.pre_balances is not None else None,
        "preTokenBalances": [] if executed else None,
        "replacementBlockhash": replacement,
        "returnData": ex.return_data,
        "unitsConsumed": ex.units,
    }


def signature_status(
    record: TxRecord | None, slot: int, search_history: bool
) -> dict[str, Any] | None:
    """``record``'s entry in ``getSignatureStatuses`` at ``slot`` (None: unknown, or aged out of
    the status cache and ``searchTransactionHistory`` not asked)."""
    if record is None:
        return None
    age = slot - record.slot
    if age > STATUS_CACHE_SLOTS and not search_history:
        return None
    finalized = age >= FINALITY_DEPTH
    return {
        "confirmationStatus": "finalized" if finalized else "confirmed",
        "confirmations": None if finalized else age,
        "err": record.err,
        "slot": record.slot,
        "status": _status(record.err),
    }


SIGNATURE_COST = 720
WRITE_LOCK_COST = 300
DATA_BYTES_PER_UNIT = 4
LOADED_DATA_PAGE_COST = 8
"""agave's block cost model: per signature, per writable account, per 4 bytes of instruction
data, and per 32 KiB page of loaded account data (one page counted here: the record does not
keep the loaded size, and the project's transactions load less)."""


def cost_units(tx: VersionedTransaction, consumed: int) -> int:
    """``meta.costUnits``: what the transaction counts against the block's cost limit."""
    msg = tx.message
    h, n = msg.header, len(msg.account_keys)
    signed = h.num_required_signatures
    writable = (signed - h.num_readonly_signed_accounts) + (
        n - signed - h.num_readonly_unsigned_accounts
    )
    data = sum(len(bytes(ix.data)) for ix in msg.instructions)
    return (
        SIGNATURE_COST * len(tx.signatures)
        + WRITE_LOCK_COST * writable
        + data // DATA_BYTES_PER_UNIT
        + consumed
        + LOADED_DATA_PAGE_COST
    )


def confirmed_transaction(record: TxRecord, encoding: str, with_version: bool) -> dict[str, Any]:
    """``getTransaction``'s answer for a committed transaction, the transaction in ``encoding``
    (``json``, ``base64`` or ``base58``); ``with_version`` when the caller named
    ``maxSupportedTransactionVersion``."""
    tx = VersionedTransaction.from_bytes(record.wire)
    transaction: Any
    if encoding == "base64":
        transaction = [base64.b64encode(record.wire).decode(), "base64"]
    elif encoding == "base58":
        transaction = [base58.b58encode(record.wire).decode(), "base58"]
    else:
        transaction = {
            "message": _ui_message(tx),
            "signatures": [str(s) for s in tx.signatures],
        }
    meta: dict[str, Any] = {
        "computeUnitsConsumed": record.compute_units,
        "costUnits": cost_units(tx, record.compute_units),
        "err": record.err,
        "fee": record.fee,
        "innerInstructions": list(record.inner_instructions),
        "loadedAddresses": {"readonly": [], "writable": []},
        "logMessages": list(record.logs),
        "postBalances": list(record.post_balances),
        "postTokenBalances": [],
        "preBalances": list(record.pre_balances),
        "preTokenBalances": [],
        "rewards": [],
        "status": _status(record.err),
    }
    if record.return_data is not None:
        meta["returnData"] = record.return_data
    out: dict[str, Any] = {
        "blockTime": record.block_time,
        "meta": meta,
        "slot": record.slot,
        "transaction": transaction,
        "transactionIndex": record.index,
    }
    if with_version:
        out["version"] = "legacy" if record.legacy else 0
    return out
