"""``getProgramAccounts``: the accounts a program owns, with a validator's filters (``dataSize``,
``memcmp``) and answer shape.

LiteSVM cannot list its accounts, so the keys come from what the chain committed (the index that
``getSignaturesForAddress`` keeps, :mod:`psyche.localsvm.signatures`): every account
key of every committed transaction (accounts a program creates are always among its
instruction's keys; the project sends no address-lookup-table transactions). The owner and data
are read live, so an account closed or reassigned since drops out. Found missing by the
differential test against a real validator (tests/validator): ``psyche-solana-client``'s
"no such run" answer lists the run ids with this call.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import base58
import msgspec

from psyche.localsvm.accounts import EncodingError, ui_account
from psyche.localsvm.chain import Chain
from psyche.localsvm.params import AccountConfig, config, min_context_slot_reached, parse_pubkey
from psyche.localsvm.protocol import (
    INVALID_REQUEST,
    Handler,
    RpcFault,
    invalid_params,
    positional,
)
from psyche.localsvm.signatures import SignatureIndex

__all__ = ["ProgramAccounts"]

MAX_FILTERS = 4
"""A validator's limit on filters per request."""


class Memcmp(msgspec.Struct, kw_only=True):
    offset: int
    bytes: str
    encoding: str | None = None


class Filter(msgspec.Struct, rename="camel", kw_only=True):
    data_size: int | None = None
    memcmp: Memcmp | None = None


class ProgramAccountsConfig(AccountConfig, kw_only=True):
    filters: list[Filter] | None = None
    with_context: bool | None = None


def _matcher(f: Filter) -> tuple[int | None, int, bytes]:
    """(dataSize or None, memcmp offset, memcmp bytes) of one filter."""
    if (f.data_size is None) == (f.memcmp is None):
        raise invalid_params("Invalid params: exactly one of dataSize or memcmp per filter")
    if f.data_size is not None:
        return f.data_size, 0, b""
    assert f.memcmp is not None
    try:
        if f.memcmp.encoding in (None, "base58"):
            raw = base58.b58decode(f.memcmp.bytes)
        elif f.memcmp.encoding == "base64":
            raw = base64.b64decode(f.memcmp.bytes, validate=True)
        else:
            raise ValueError(f.memcmp.encoding)
    except ValueError:
        raise invalid_params("Invalid params: invalid memcmp bytes or encoding") from None
    return None, f.memcmp.offset, raw


class ProgramAccounts:
    """The ``getProgramAccounts`` method over every key the chain committed."""

    def __init__(
        self, chain: Chain, index: SignatureIndex, context: Callable[[Any], dict[str, Any]]
    ) -> None:
        self.chain = chain
        self.index = index
        """The committed keys, already kept by ``getSignaturesForAddress``'s index."""
        self.context = context
        """Wraps a value in the front's ``{"context", "value"}`` (``withContext``)."""

    def methods(self) -> dict[str, Handler]:
        return {"getProgramAccounts": self.get_program_accounts}

    def get_program_accounts(self, params: list[Any]) -> Any:
        value, cfg_value = positional(params, 1, 2)
        owner = parse_pubkey(value)
        cfg = config(cfg_value, ProgramAccountsConfig)
        min_context_slot_reached(cfg, self.chain.slot)
        filters = [_matcher(f) for f in cfg.filters or []]
        if len(filters) > MAX_FILTERS:
            raise invalid_params(f"Too many filters provided; max {MAX_FILTERS}")
        encoding = cfg.encoding or "binary"
        found = []
        for key in self.index.committed_keys():
            acc = self.chain.get_account(key)
            if acc is None or acc.owner != owner or acc.lamports == 0:
                continue
            data = bytes(acc.data)
            if not all(
                (len(data) == size) if size is not None else data[off : off + len(raw)] == raw
                for size, off, raw in filters
            ):
                continue
            try:
                shown = ui_account(acc, "base64" if encoding == "jsonParsed" else encoding,
                                   cfg.slice)  # fmt: skip
            except EncodingError as e:
                raise RpcFault(INVALID_REQUEST, str(e)) from None
            found.append({"pubkey": str(key), "account": shown})
        if cfg.with_context:
            return self.context(found)
        return found
