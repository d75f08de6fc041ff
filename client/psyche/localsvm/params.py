"""The parameters of the RPC methods: configuration objects (msgspec structs with the validator's
camelCase names; unknown keys ignored as serde does) and the typed values (keys, signatures,
hashes, transactions) with the validator's -32602 messages."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal, TypeVar

import base58
import msgspec
from solders.hash import Hash
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from psyche.localsvm.accounts import Encoding
from psyche.localsvm.errors import describe
from psyche.localsvm.protocol import RpcFault, convert, invalid_params

__all__ = [
    "AccountConfig",
    "ContextConfig",
    "SendConfig",
    "SignatureStatusConfig",
    "SimulateConfig",
    "SubscribeConfig",
    "TransactionConfig",
    "config",
    "decode_transaction",
    "min_context_slot_reached",
    "parse_blockhash",
    "parse_pubkey",
    "parse_signature",
]

Commitment = Literal[
    "processed", "confirmed", "finalized", "recent", "single", "singleGossip", "root", "max"
]
TxEncoding = Literal["base58", "base64"]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
C = TypeVar("C", bound=msgspec.Struct)

PACKET_DATA_SIZE = 1232
MAX_BASE58_SIZE = 1683
MAX_BASE64_SIZE = 1644
_TX_TYPE = "solana_transaction::versioned::VersionedTransaction"


class ContextConfig(msgspec.Struct, rename="camel", kw_only=True):
    commitment: Commitment | None = None
    min_context_slot: NonNegative | None = None


class DataSlice(msgspec.Struct, kw_only=True):
    offset: NonNegative
    length: NonNegative


class AccountConfig(ContextConfig, kw_only=True):
    encoding: Encoding | None = None
    data_slice: DataSlice | None = None

    @property
    def slice(self) -> tuple[int, int] | None:
        return None if self.data_slice is None else (self.data_slice.offset, self.data_slice.length)


class SendConfig(msgspec.Struct, rename="camel", kw_only=True):
    skip_preflight: bool = False
    preflight_commitment: Commitment | None = None
    encoding: TxEncoding | None = None
    max_retries: NonNegative | None = None
    min_context_slot: NonNegative | None = None


class SimulateAccounts(msgspec.Struct, kw_only=True):
    addresses: list[str]
    encoding: Encoding | None = None


class SimulateConfig(ContextConfig, kw_only=True):
    sig_verify: bool = False
    replace_recent_blockhash: bool = False
    encoding: TxEncoding | None = None
    accounts: SimulateAccounts | None = None
    inner_instructions: bool = False


class SignatureStatusConfig(msgspec.Struct, rename="camel", kw_only=True):
    search_transaction_history: bool = False


class TransactionConfig(msgspec.Struct, rename="camel", kw_only=True):
    encoding: Literal["json", "jsonParsed", "base58", "base64"] | None = None
    commitment: Commitment | None = None
    max_supported_transaction_version: NonNegative | None = None


class SubscribeConfig(msgspec.Struct, rename="camel", kw_only=True):
    commitment: Commitment | None = None
    encoding: Encoding | None = None
    data_slice: DataSlice | None = None
    enable_received_notification: bool = False

    @property
    def slice(self) -> tuple[int, int] | None:
        return None if self.data_slice is None else (self.data_slice.offset, self.data_slice.length)


def config(value: Any, typ: type[C]) -> C:
    """A configuration object; absent or null is the default one."""
    return typ() if value is None else convert(value, typ)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise invalid_params("Invalid params: invalid type: expected a string")
    return value


def parse_pubkey(value: Any) -> Pubkey:
    try:
        return Pubkey.from_string(_text(value))
    except Exception:  # solders raises ValueError or its own ParseHashError
        raise invalid_params("Invalid param: Invalid") from None


def parse_signature(value: Any) -> Signature:
    try:
        return Signature.from_string(_text(value))
    except Exception:  # solders raises ValueError or its own ParseHashError
        raise invalid_params("Invalid param: Invalid") from None


def parse_blockhash(value: Any) -> Hash:
    try:
        return Hash.from_string(_text(value))
    except Exception:  # solders raises ValueError or its own ParseHashError
        raise invalid_params("Invalid param: Invalid") from None


def decode_binary(value: Any, encoding: TxEncoding, what: str, max_encoded: int) -> bytes:
    text = _text(value)
    if len(text) > max_encoded:
        raise invalid_params(
            f"{encoding} encoded {what} too large: {len(text)} bytes "
            f"(max: encoded/raw {max_encoded}/{PACKET_DATA_SIZE})"
        )
    try:
        if encoding == "base58":
            raw = base58.b58decode(text)
        else:
            raw = base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as e:
        raise invalid_params(f"invalid {encoding} encoding: {e}") from None
    if len(raw) > PACKET_DATA_SIZE:
        raise invalid_params(
            f"decoded {what} too large: {len(raw)} bytes (max: {PACKET_DATA_SIZE} bytes)"
        )
    return raw


def decode_transaction(value: Any, encoding: TxEncoding) -> VersionedTransaction:
    """A wire transaction, decoded and sanitized as the validator's RPC does."""
    max_encoded = MAX_BASE58_SIZE if encoding == "base58" else MAX_BASE64_SIZE
    raw = decode_binary(value, encoding, _TX_TYPE, max_encoded)
    try:
        tx = VersionedTransaction.from_bytes(raw)
    except Exception as e:
        raise invalid_params(f"failed to deserialize {_TX_TYPE}: {e}") from None
    try:
        tx.sanitize()
    except Exception:
        raise invalid_params(f"invalid transaction: {describe('SanitizeFailure')}") from None
    return tx


def min_context_slot_reached(cfg: ContextConfig | SendConfig, slot: int) -> None:
    if cfg.min_context_slot is not None and slot < cfg.min_context_slot:
        raise RpcFault(-32016, "Minimum context slot has not been reached", {"contextSlot": slot})
