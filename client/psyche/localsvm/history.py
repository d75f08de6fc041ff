"""Processed transactions: what ``getSignatureStatuses``/``getTransaction`` answer from, what
refuses a duplicate (the status cache of a bank), and what a cost benchmark reads."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from solders.signature import Signature

from psyche.localsvm.errors import TxErr

__all__ = ["History", "TxRecord"]


@dataclass(frozen=True, slots=True)
class TxRecord:
    """One transaction the chain committed (it succeeded, or failed and paid its fee)."""

    signature: Signature
    slot: int
    block_time: int
    wire: bytes
    legacy: bool
    err: TxErr
    logs: tuple[str, ...]
    compute_units: int
    fee: int
    pre_balances: tuple[int, ...]
    post_balances: tuple[int, ...]
    inner_instructions: tuple[dict[str, Any], ...]
    return_data: dict[str, Any] | None
    index: int = 0
    """Its position among the slot's transactions (``transactionIndex``)."""

    @property
    def ok(self) -> bool:
        return self.err is None


class History:
    """Records by signature, oldest first. Beyond ``capacity`` the oldest are dropped, but never
    one whose blockhash could still be valid (``protect_from`` slot on), so the duplicate check
    stays exact."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._records: OrderedDict[Signature, TxRecord] = OrderedDict()
        self.count = 0

    def add(self, record: TxRecord, protect_from: int) -> None:
        self._records[record.signature] = record
        self.count += 1
        while len(self._records) > self.capacity:
            oldest = next(iter(self._records.values()))
            if oldest.slot >= protect_from:
                break
            self._records.popitem(last=False)

    def get(self, signature: Signature) -> TxRecord | None:
        return self._records.get(signature)

    def __contains__(self, signature: object) -> bool:
        return signature in self._records

    def __iter__(self) -> Iterator[TxRecord]:
        return iter(list(self._records.values()))

    def __len__(self) -> int:
        return len(self._records)
