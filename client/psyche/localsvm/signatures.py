"""``getSignaturesForAddress``: the transactions that named an address, newest first.

An indexer follows a program's accounts by paging this method back to the last signature it
stored (``until``) and then reading each transaction (``getTransaction``). A validator answers it
from its ledger; the local SVM answers from an index of every committed transaction's account
keys, fed by the chain's transaction listener (and, at start, by the records already in its
history). Like the history, the index forgets records the history has dropped.

The answer's shape is a validator's: ``[{signature, slot, err, memo, blockTime,
confirmationStatus}]``, at most ``limit`` (≤ 1000) entries, starting after ``before`` and stopping
at ``until`` (both exclusive).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from psyche.localsvm.chain import Chain
from psyche.localsvm.history import TxRecord
from psyche.localsvm.params import ContextConfig, config, parse_pubkey, parse_signature
from psyche.localsvm.protocol import Handler, invalid_params, positional

__all__ = ["MAX_LIMIT", "SignatureIndex"]

MAX_LIMIT = 1000
"""A validator's cap on ``limit``."""


class SignaturesConfig(ContextConfig, kw_only=True):
    limit: int | None = None
    before: str | None = None
    until: str | None = None


class SignatureIndex:
    """Signatures by account key, in commit order."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self._by_key: dict[Pubkey, list[Signature]] = defaultdict(list)
        for record in chain.history:
            self._add(record)
        chain.tx_listeners.append(self._add)

    def _add(self, record: TxRecord) -> None:
        try:
            keys = VersionedTransaction.from_bytes(record.wire).message.account_keys
        except Exception:  # a record the chain committed always parses; be safe anyway
            return
        for key in dict.fromkeys(keys):
            self._by_key[key].append(record.signature)

    def committed_keys(self) -> Iterable[Pubkey]:
        """Every account key of a committed transaction, in first-seen order."""
        return self._by_key.keys()

    def methods(self) -> dict[str, Handler]:
        return {"getSignaturesForAddress": self.get_signatures_for_address}

    def get_signatures_for_address(self, params: list[Any]) -> Any:
        value, cfg_value = positional(params, 1, 2)
        address = parse_pubkey(value)
        cfg = config(cfg_value, SignaturesConfig)
        limit = MAX_LIMIT if cfg.limit is None else cfg.limit
        if not 1 <= limit <= MAX_LIMIT:
            raise invalid_params(f"Invalid limit; max {MAX_LIMIT}")
        before = parse_signature(cfg.before) if cfg.before is not None else None
        until = parse_signature(cfg.until) if cfg.until is not None else None
        history = self.chain.history
        sigs = self._by_key.get(address, [])
        # Drop what the history forgot, so the index stays as long as the history.
        while sigs and sigs[0] not in history:
            sigs.pop(0)
        out: list[dict[str, Any]] = []
        started = before is None
        for sig in reversed(sigs):
            if not started:
                started = sig == before
                continue
            if sig == until:
                break
            record = history.get(sig)
            if record is None:
                continue
            out.append(
                {
                    "signature": str(sig),
                    "slot": record.slot,
                    "err": record.err,
                    "memo": None,
                    "blockTime": record.block_time,
                    "confirmationStatus": "finalized",
                    "transactionIndex": record.index,
                }
            )
            if len(out) >= limit:
                break
        return out
