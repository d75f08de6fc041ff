"""The HTTP JSON-RPC methods, answering in a validator's shapes (``{"context": {"slot",
"apiVersion"}, "value": …}`` where a validator wraps, its error codes and messages).

Every commitment level reads the one current state (there are no forks to wait out), and each
request first brings the chain up to the wall clock (:meth:`Chain.sync`). The handlers parse
(:mod:`~psyche.localsvm.params`) and check each request and ask the chain; a transaction's
answer shapes are in :mod:`~psyche.localsvm.transactions`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from solders.message import MessageV0, from_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from psyche.localsvm.accounts import Encoding, EncodingError, ui_account
from psyche.localsvm.chain import MAX_PROCESSING_AGE, Chain
from psyche.localsvm.errors import describe
from psyche.localsvm.params import (
    AccountConfig,
    ContextConfig,
    SendConfig,
    SignatureStatusConfig,
    SimulateConfig,
    TransactionConfig,
    config,
    decode_binary,
    decode_transaction,
    min_context_slot_reached,
    parse_blockhash,
    parse_pubkey,
    parse_signature,
)
from psyche.localsvm.program_accounts import ProgramAccounts
from psyche.localsvm.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    Handler,
    RpcFault,
    convert,
    invalid_params,
    positional,
)
from psyche.localsvm.signatures import SignatureIndex
from psyche.localsvm.transactions import (
    confirmed_transaction,
    signature_status,
    simulation_value,
)

__all__ = ["API_VERSION", "RpcMethods"]

API_VERSION = "2.2.0"
"""The Agave version whose program runtime LiteSVM (solders 0.26) embeds."""
MAX_MULTIPLE_ACCOUNTS = 100
MAX_SIGNATURE_STATUSES = 256
MAX_PRIORITIZATION_FEE_ADDRESSES = 128
PREFLIGHT_FAILURE = -32002
UNSUPPORTED_TRANSACTION_VERSION = -32015


class RpcMethods:
    """The method table of the HTTP front, over one :class:`Chain`."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain

    def table(self) -> dict[str, Handler]:
        methods: dict[str, Callable[[list[Any]], Any]] = {
            "getAccountInfo": self.get_account_info,
            "getBalance": self.get_balance,
            "getBlockHeight": self.get_block_height,
            "getEpochInfo": self.get_epoch_info,
            "getEpochSchedule": self.get_epoch_schedule,
            "getFeeForMessage": self.get_fee_for_message,
            "getFirstAvailableBlock": lambda p: self._no_params(p, 0),
            "getGenesisHash": lambda p: self._no_params(p, str(self.chain.genesis_hash)),
            "getHealth": lambda p: self._no_params(p, "ok"),
            "getLatestBlockhash": self.get_latest_blockhash,
            "getMinimumBalanceForRentExemption": self.get_minimum_balance,
            "getMultipleAccounts": self.get_multiple_accounts,
            "getRecentPrioritizationFees": self.get_recent_prioritization_fees,
            "getSignatureStatuses": self.get_signature_statuses,
            "getSlot": self.get_slot,
            "getTransaction": self.get_transaction,
            "getTransactionCount": self.get_transaction_count,
            "getVersion": lambda p: self._no_params(
                p, {"solana-core": API_VERSION, "feature-set": 0}
            ),
            "isBlockhashValid": self.is_blockhash_valid,
            "requestAirdrop": self.request_airdrop,
            "sendTransaction": self.send_transaction,
            "simulateTransaction": self.simulate_transaction,
        }

        index = SignatureIndex(self.chain)
        methods.update(index.methods())
        methods.update(ProgramAccounts(self.chain, index, self._context).methods())

        def synced(fn: Handler) -> Handler:
            def call(params: list[Any]) -> Any:
                self.chain.sync()
                return fn(params)

            return call

        return {name: synced(fn) for name, fn in methods.items()}

    # --- helpers --------------------------------------------------------------------------------

    def _context(self, value: Any) -> dict[str, Any]:
        return {"context": {"apiVersion": API_VERSION, "slot": self.chain.slot}, "value": value}

    def _last_valid_block_height(self) -> int:
        return self.chain.block_height + MAX_PROCESSING_AGE

    @staticmethod
    def _no_params(params: list[Any], value: Any) -> Any:
        positional(params, 0, 0)
        return value

    def _context_config(self, value: Any) -> ContextConfig:
        cfg = config(value, ContextConfig)
        min_context_slot_reached(cfg, self.chain.slot)
        return cfg

    def _account(
        self, pubkey: Pubkey, encoding: Encoding, data_slice: tuple[int, int] | None
    ) -> dict[str, Any] | None:
        acc = self.chain.get_account(pubkey)
        if acc is None:
            return None
        try:
            return ui_account(acc, encoding, data_slice)
        except EncodingError as e:
            raise RpcFault(INVALID_REQUEST, str(e)) from None

    @staticmethod
    def _account_config(value: Any) -> tuple[Encoding, tuple[int, int] | None, AccountConfig]:
        cfg = config(value, AccountConfig)
        encoding: Encoding = cfg.encoding or "binary"
        if encoding == "jsonParsed" and cfg.data_slice is not None:
            raise invalid_params(
                "Sliced account data can only be encoded using binary (base 58) or base64 encoding."
            )
        # No parser here: jsonParsed is answered in base64, as a validator does for an account
        # it cannot parse.
        return ("base64" if encoding == "jsonParsed" else encoding), cfg.slice, cfg

    # --- accounts -------------------------------------------------------------------------------

    def get_account_info(self, params: list[Any]) -> Any:
        key, cfg_value = positional(params, 1, 2)
        pubkey = parse_pubkey(key)
        encoding, data_slice, cfg = self._account_config(cfg_value)
        min_context_slot_reached(cfg, self.chain.slot)
        return self._context(self._account(pubkey, encoding, data_slice))

    def get_multiple_accounts(self, params: list[Any]) -> Any:
        keys, cfg_value = positional(params, 1, 2)
        keys = convert(keys, list[str])
        if len(keys) > MAX_MULTIPLE_ACCOUNTS:
            raise invalid_params(f"Too many inputs provided; max {MAX_MULTIPLE_ACCOUNTS}")
        pubkeys = [parse_pubkey(k) for k in keys]
        encoding, data_slice, cfg = self._account_config(cfg_value)
        min_context_slot_reached(cfg, self.chain.slot)
        return self._context([self._account(k, encoding, data_slice) for k in pubkeys])

    def get_balance(self, params: list[Any]) -> Any:
        key, cfg_value = positional(params, 1, 2)
        pubkey = parse_pubkey(key)
        self._context_config(cfg_value)
        acc = self.chain.get_account(pubkey)
        return self._context(acc.lamports if acc is not None else 0)

    def get_minimum_balance(self, params: list[Any]) -> Any:
        size, cfg_value = positional(params, 1, 2)
        size = convert(size, int)
        if size < 0:
            raise invalid_params("Invalid params: data length must be non-negative")
        self._context_config(cfg_value)
        return self.chain.minimum_balance(size)

    # --- slots and blockhashes ------------------------------------------------------------------

    def get_slot(self, params: list[Any]) -> Any:
        (cfg_value,) = positional(params, 0, 1)
        self._context_config(cfg_value)
        return self.chain.slot

    def get_block_height(self, params: list[Any]) -> Any:
        (cfg_value,) = positional(params, 0, 1)
        self._context_config(cfg_value)
        return self.chain.block_height

    def get_epoch_info(self, params: list[Any]) -> Any:
        (cfg_value,) = positional(params, 0, 1)
        self._context_config(cfg_value)
        epoch, index, slots = self.chain.epoch
        return {
            "absoluteSlot": self.chain.slot,
            "blockHeight": self.chain.block_height,
            "epoch": epoch,
            "slotIndex": index,
            "slotsInEpoch": slots,
            "transactionCount": self.chain.history.count,
        }

    def get_epoch_schedule(self, params: list[Any]) -> Any:
        positional(params, 0, 0)
        s = self.chain.clock.schedule
        return {
            "firstNormalEpoch": s.first_normal_epoch,
            "firstNormalSlot": s.first_normal_slot,
            "leaderScheduleSlotOffset": s.leader_schedule_slot_offset,
            "slotsPerEpoch": s.slots_per_epoch,
            "warmup": s.warmup,
        }

    def get_transaction_count(self, params: list[Any]) -> Any:
        (cfg_value,) = positional(params, 0, 1)
        self._context_config(cfg_value)
        return self.chain.history.count

    def get_latest_blockhash(self, params: list[Any]) -> Any:
        (cfg_value,) = positional(params, 0, 1)
        self._context_config(cfg_value)
        blockhash, last_valid = self.chain.latest_blockhash()
        return self._context({"blockhash": str(blockhash), "lastValidBlockHeight": last_valid})

    def is_blockhash_valid(self, params: list[Any]) -> Any:
        value, cfg_value = positional(params, 1, 2)
        blockhash = parse_blockhash(value)
        self._context_config(cfg_value)
        return self._context(self.chain.is_blockhash_valid(blockhash))

    def get_fee_for_message(self, params: list[Any]) -> Any:
        value, cfg_value = positional(params, 1, 2)
        raw = decode_binary(value, "base64", "solana_message::VersionedMessage", 1644)
        try:
            msg = from_bytes_versioned(raw)
            if isinstance(msg, MessageV0):
                msg.sanitize()
            else:
                Transaction.new_unsigned(msg).sanitize()
        except Exception as e:
            raise invalid_params(f"invalid message: {e}") from None
        self._context_config(cfg_value)
        return self._context(self.chain.fee_for_message(msg))

    def get_recent_prioritization_fees(self, params: list[Any]) -> Any:
        (keys,) = positional(params, 0, 1)
        keys = convert(keys, list[str]) if keys is not None else []
        if len(keys) > MAX_PRIORITIZATION_FEE_ADDRESSES:
            raise invalid_params(
                f"Too many inputs provided; max {MAX_PRIORITIZATION_FEE_ADDRESSES}"
            )
        for k in keys:
            parse_pubkey(k)
        return []

    # --- transactions ---------------------------------------------------------------------------

    def send_transaction(self, params: list[Any]) -> Any:
        value, cfg_value = positional(params, 1, 2)
        cfg = config(cfg_value, SendConfig)
        tx = decode_transaction(value, cfg.encoding or "base58")
        min_context_slot_reached(cfg, self.chain.slot)
        if not cfg.skip_preflight:
            # A validator verifies signatures inside its preflight simulation (agave 4.2: a
            # preflight failure with err SignatureFailure, not -32003).
            sim = self.chain.simulate(tx, sig_verify=True)
            if sim.err is not None:
                raise RpcFault(
                    PREFLIGHT_FAILURE,
                    f"Transaction simulation failed: {describe(sim.err)}",
                    simulation_value(
                        sim, None, False, self._last_valid_block_height(), preflight=True
                    ),
                )
        # Without preflight a transaction that fails before execution is dropped, as by a
        # leader: the caller gets its signature and never a status.
        return str(self.chain.process(tx).signature)

    def simulate_transaction(self, params: list[Any]) -> Any:
        value, cfg_value = positional(params, 1, 2)
        cfg = config(cfg_value, SimulateConfig)
        if cfg.sig_verify and cfg.replace_recent_blockhash:
            raise invalid_params("sigVerify may not be used with replaceRecentBlockhash")
        tx = decode_transaction(value, cfg.encoding or "base58")
        min_context_slot_reached(cfg, self.chain.slot)
        # A forged signature with sigVerify is the simulation's err (SignatureFailure), as
        # agave 4.2 answers it, not an RPC error.
        ex = self.chain.simulate(
            tx, sig_verify=cfg.sig_verify, replace_blockhash=cfg.replace_recent_blockhash
        )
        accounts: list[Any] | None = None
        if cfg.accounts is not None:
            encoding: Encoding = cfg.accounts.encoding or "base64"
            if encoding in ("binary", "base58"):
                raise invalid_params("base58 encoding not supported")
            if encoding == "jsonParsed":
                encoding = "base64"
            n = len(tx.message.account_keys)
            if len(cfg.accounts.addresses) > n:
                raise invalid_params(f"Too many accounts provided; max {n}")
            keys = [parse_pubkey(a) for a in cfg.accounts.addresses]
            if ex.err is not None:
                accounts = [None] * len(keys)
            else:
                accounts = []
                for k in keys:
                    acc = ex.post_accounts.get(k)
                    if acc is None:
                        acc = self.chain.get_account(k)
                    live = acc is not None and acc.lamports > 0
                    accounts.append(ui_account(acc, encoding) if live and acc is not None else None)
        return self._context(
            simulation_value(ex, accounts, cfg.inner_instructions, self._last_valid_block_height())
        )

    def get_signature_statuses(self, params: list[Any]) -> Any:
        sigs, cfg_value = positional(params, 1, 2)
        sigs = convert(sigs, list[str])
        if len(sigs) > MAX_SIGNATURE_STATUSES:
            raise invalid_params(f"Too many inputs provided; max {MAX_SIGNATURE_STATUSES}")
        signatures = [parse_signature(s) for s in sigs]
        cfg = config(cfg_value, SignatureStatusConfig)
        return self._context(
            [
                signature_status(
                    self.chain.transaction(s), self.chain.slot, cfg.search_transaction_history
                )
                for s in signatures
            ]
        )

    def get_transaction(self, params: list[Any]) -> Any:
        value, cfg_value = positional(params, 1, 2)
        signature = parse_signature(value)
        # The legacy form of the config is the encoding name alone.
        if isinstance(cfg_value, str):
            cfg_value = {"encoding": cfg_value}
        cfg = config(cfg_value, TransactionConfig)
        if cfg.commitment == "processed":
            raise invalid_params("Method does not support commitment below `confirmed`")
        record = self.chain.transaction(signature)
        if record is None:
            return None
        if not record.legacy and cfg.max_supported_transaction_version is None:
            raise RpcFault(
                UNSUPPORTED_TRANSACTION_VERSION,
                "Transaction version (0) is not supported by the requesting client. Please try "
                "the request again with the following configuration parameter: "
                '"maxSupportedTransactionVersion": 0',
            )
        encoding = cfg.encoding or "json"
        return confirmed_transaction(
            record, encoding, cfg.max_supported_transaction_version is not None
        )

    def request_airdrop(self, params: list[Any]) -> Any:
        key, lamports, cfg_value = positional(params, 2, 3)
        pubkey = parse_pubkey(key)
        lamports = convert(lamports, int)
        if lamports <= 0 or lamports >= 2**64:
            raise invalid_params("Invalid params: lamports must be a positive u64")
        self._context_config(cfg_value)
        ex = self.chain.airdrop(pubkey, lamports)
        if not ex.committed:
            # A validator reports a faucet refusal as an internal error; the reason is in data.
            raise RpcFault(INTERNAL_ERROR, "Internal error", describe(ex.err))
        return str(ex.signature)
