"""The chain: LiteSVM running the programs, with the rules a validator applies around execution.

LiteSVM executes transactions exactly as the runtime does (same program runtime, same syscalls,
compute budget and sigverify), but it is a library, not a cluster: one blockhash, a clock that
stands still, no rent-state check, no prioritization fee. :class:`Chain` adds those:

* **Slots and clock** follow wall time (:class:`~psyche.localsvm.clock.SlotClock`); the Clock
  sysvar is rewritten before every transaction and every read, so a transaction sees the current
  wall-clock second even between slot ticks.
* **Blockhashes**: one per slot; a transaction must name one of age ≤ 150 slots
  (``BlockhashNotFound``), a simulation one of age ≤ 144 (a validator leaves room for forwarding).
  LiteSVM accepts only its single latest blockhash, so its own check is off and this queue
  decides (``with_blockhash_check(False)``).
* **Duplicates**: a signature already committed is ``AlreadyProcessed``. LiteSVM's own history is
  off (``with_transaction_history(0)``): ours spans the whole blockhash window and also keeps
  the logs, fee and compute units that ``getTransaction`` and benchmarks read.
* **Fee payer**: must exist (``AccountNotFound``), be a system account (``InvalidAccountForFee``),
  afford the fee (``InsufficientFundsForFee``) and stay rent-exempt after it.
* **Fees**: 5000 lamports per signature (charged by LiteSVM, also when execution fails) plus the
  prioritization fee (charged here).
* **Rent**: the runtime's rent-state transition rule on every writable account
  (``InsufficientFundsForRent``); a violation commits the fee only, as on a validator.

Transactions that fail before execution (bad signature, unknown blockhash, duplicate, fee payer)
are not committed: no fee, no record, no status — a validator drops them too.

Not thread-safe (neither is LiteSVM): call it from one thread only.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from solders.account import Account
from solders.compute_budget import set_compute_unit_limit
from solders.hash import Hash
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message, MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction
from solders.transaction_metadata import FailedTransactionMetadata

from psyche.localsvm.clock import BlockhashQueue, SlotClock
from psyche.localsvm.errors import TxErr, rent_error
from psyche.localsvm.execution import Execution, failure, meta_fields, with_blockhash
from psyche.localsvm.fees import MAX_COMPUTE_UNIT_LIMIT, FeeDetails, fee_details
from psyche.localsvm.history import History, TxRecord
from psyche.localsvm.rent import rent_state, rent_violation, transition_allowed

__all__ = ["FAUCET_LAMPORTS", "MAX_PROCESSING_AGE", "PREFLIGHT_MAX_AGE", "Chain"]

log = logging.getLogger(__name__)

MAX_PROCESSING_AGE = 150
# A validator simulates (preflight) with a shorter window, leaving room to forward the
# transaction to the leader: MAX_PROCESSING_AGE - MAX_TRANSACTION_FORWARDING_DELAY.
PREFLIGHT_MAX_AGE = MAX_PROCESSING_AGE - 6
FAUCET_LAMPORTS = 500_000_000 * 10**9
SYSTEM_PROGRAM = Pubkey.from_string("11111111111111111111111111111111")
NONCE_ACCOUNT_SIZE = 80

SlotListener = Callable[[int], None]
AccountListener = Callable[[int, Pubkey, Account | None], None]
TxListener = Callable[[TxRecord], None]


def _changed(before: Account | None, after: Account | None) -> bool:
    if before is None or after is None:
        return (before is None) != (after is None)
    return (
        before.lamports != after.lamports
        or before.owner != after.owner
        or before.executable != after.executable
        or bytes(before.data) != bytes(after.data)
    )


class Chain:
    """LiteSVM with the programs loaded and a validator's rules (module docstring)."""

    def __init__(
        self,
        programs: Mapping[Pubkey, bytes] | None = None,
        *,
        now: Callable[[], float] = time.time,
        faucet_lamports: int = FAUCET_LAMPORTS,
        history_capacity: int = 100_000,
    ) -> None:
        # LiteSVM accepts only its single latest blockhash and keeps its own bounded duplicate
        # history; both checks are made here instead (blockhash age ≤ 150, our history), so
        # its own are off. Signatures it does verify.
        self.svm = (
            LiteSVM().with_sigverify(True).with_blockhash_check(False).with_transaction_history(0)
        )
        self.clock = SlotClock(now)
        self.svm.set_epoch_schedule(self.clock.schedule)
        self.genesis_hash = Hash(os.urandom(32))
        self.blockhashes = BlockhashQueue(self.genesis_hash)
        self.history = History(history_capacity)
        self.faucet = Keypair()
        self.svm.set_account(self.faucet.pubkey(), Account(faucet_lamports, b"", SYSTEM_PROGRAM))
        self.programs = dict(programs or {})
        for program_id, elf in self.programs.items():
            self.svm.add_program(program_id, elf)
        self.slot = 0
        self.unix_timestamp = 0
        self.watched: Counter[Pubkey] = Counter()
        self.slot_listeners: list[SlotListener] = []
        self.account_listeners: list[AccountListener] = []
        self.tx_listeners: list[TxListener] = []
        self._clock_set: tuple[int, int] | None = None
        self._rent_minimum: dict[int, int] = {}
        self._airdrops = 0
        self._slot_count = (-1, 0)
        """(slot, transactions committed in it so far): the next record's ``index``."""
        self.sync()

    # --- time -----------------------------------------------------------------------------------

    def sync(self) -> int:
        """Bring slot, blockhashes and the Clock sysvar up to the wall clock; returns the slot."""
        slot, unix = self.clock.read()
        new = self.blockhashes.advance_to(slot)
        if (slot, unix) != self._clock_set:
            self.svm.set_clock(self.clock.sysvar(slot, unix))
            self._clock_set = (slot, unix)
        self.slot, self.unix_timestamp = slot, unix
        for s in new[-MAX_PROCESSING_AGE:]:
            self._emit(self.slot_listeners, s)
        return slot

    def advance_slots(self, n: int) -> int:
        """Test hook: move the chain ``n`` slots (and ``0.4·n`` s of clock) into the future."""
        self.clock.advance_slots(n)
        return self.sync()

    def advance_time(self, seconds: float) -> int:
        """Test hook: move the chain clock (and the slots with it) ``seconds`` ahead."""
        self.clock.advance(seconds)
        return self.sync()

    @property
    def block_height(self) -> int:
        return self.slot

    @property
    def epoch(self) -> tuple[int, int, int]:
        """(epoch, slot index, slots in epoch)."""
        epoch, index = self.clock.schedule.get_epoch_and_slot_index(self.slot)
        return epoch, index, self.clock.schedule.get_slots_in_epoch(epoch)

    def latest_blockhash(self) -> tuple[Hash, int]:
        """(blockhash, last valid block height)."""
        self.sync()
        return self.blockhashes.latest, self.block_height + MAX_PROCESSING_AGE

    def is_blockhash_valid(self, blockhash: Hash, max_age: int = MAX_PROCESSING_AGE) -> bool:
        age = self.blockhashes.age(blockhash)
        return age is not None and age <= max_age

    # --- accounts -------------------------------------------------------------------------------

    def get_account(self, pubkey: Pubkey) -> Account | None:
        """The account, or None; a zero-lamport account does not exist, as in a bank."""
        acc = self.svm.get_account(pubkey)
        return acc if acc is not None and acc.lamports > 0 else None

    def balance(self, pubkey: Pubkey) -> int:
        acc = self.svm.get_account(pubkey)
        return acc.lamports if acc is not None else 0

    def minimum_balance(self, size: int) -> int:
        if size not in self._rent_minimum:
            self._rent_minimum[size] = self.svm.minimum_balance_for_rent_exemption(size)
        return self._rent_minimum[size]

    def set_account(self, pubkey: Pubkey, account: Account) -> None:
        """Genesis-style account creation (no transaction); subscribers are told."""
        before = self.get_account(pubkey)
        self.svm.set_account(pubkey, account)
        after = self.get_account(pubkey)
        if pubkey in self.watched and _changed(before, after):
            self._emit(self.account_listeners, self.slot, pubkey, after)

    def watch(self, pubkey: Pubkey) -> None:
        self.watched[pubkey] += 1

    def unwatch(self, pubkey: Pubkey) -> None:
        self.watched[pubkey] -= 1
        if self.watched[pubkey] <= 0:
            del self.watched[pubkey]

    # --- fees -----------------------------------------------------------------------------------

    def fee_for_message(self, msg: Message | MessageV0) -> int | None:
        """The fee, or None when the blockhash is not in the queue (``getFeeForMessage``)."""
        self.sync()
        if self.blockhashes.age(msg.recent_blockhash) is None:
            return None
        return fee_details(msg).total

    # --- transactions ---------------------------------------------------------------------------

    def _precheck(self, tx: VersionedTransaction, max_age: int) -> tuple[TxErr, FeeDetails]:
        """The bank's checks before execution, in its order: age, status cache, fee payer."""
        msg = tx.message
        fee = fee_details(msg)
        if not self.is_blockhash_valid(msg.recent_blockhash, max_age):
            return "BlockhashNotFound", fee
        if tx.signatures[0] in self.history:
            return "AlreadyProcessed", fee
        payer = self.svm.get_account(msg.account_keys[0])
        if payer is None or payer.lamports == 0:
            return "AccountNotFound", fee
        size = len(bytes(payer.data))
        if payer.owner != SYSTEM_PROGRAM or size not in (0, NONCE_ACCOUNT_SIZE):
            return "InvalidAccountForFee", fee
        reserve = self.minimum_balance(size) if size else 0
        if payer.lamports < reserve + fee.total:
            return "InsufficientFundsForFee", fee
        pre = rent_state(payer.lamports, size, self.minimum_balance)
        post = rent_state(payer.lamports - fee.total, size, self.minimum_balance)
        if not transition_allowed(pre, post):
            return rent_error(0), fee
        return None, fee

    def _snapshot(self, keys: Iterable[Pubkey]) -> dict[Pubkey, Account | None]:
        return {k: self.svm.get_account(k) for k in keys}

    def _charge(self, pubkey: Pubkey, lamports: int) -> None:
        acc = self.svm.get_account(pubkey)
        assert acc is not None
        self.svm.set_account(
            pubkey,
            Account(
                acc.lamports - lamports, bytes(acc.data), acc.owner, acc.executable, acc.rent_epoch
            ),
        )

    def simulate(
        self, tx: VersionedTransaction, *, sig_verify: bool = False, replace_blockhash: bool = False
    ) -> Execution:
        """What ``simulateTransaction`` and the preflight of ``sendTransaction`` run."""
        self.sync()
        replacement = None
        if replace_blockhash:
            replacement = self.blockhashes.latest
            tx = with_blockhash(tx, replacement)
        sig = tx.signatures[0] if tx.signatures else Signature.default()
        if not tx.signatures:
            return Execution(sig, "MissingSignatureForFee", self.slot)
        if sig_verify and not all(tx.verify_with_results()):
            return Execution(sig, "SignatureFailure", self.slot)
        err, fee = self._precheck(tx, PREFLIGHT_MAX_AGE)
        if err is not None:
            return Execution(sig, err, self.slot, replacement_blockhash=replacement)
        pre = self._snapshot(tx.message.account_keys)
        # Signatures were verified above when asked; a simulation does not need them otherwise.
        self.svm.with_sigverify(False)
        try:
            res = self.svm.simulate_transaction(tx)
        finally:
            self.svm.with_sigverify(True)
        keys = tx.message.account_keys
        before = tuple(a.lamports if (a := pre[k]) is not None else 0 for k in keys)
        loaded = sum(len(a.data) for k in dict.fromkeys(keys) if (a := pre[k]) is not None)
        if isinstance(res, FailedTransactionMetadata):
            err, meta = failure(res)
            # A failed execution still pays its fee, from the payer (the first key).
            after = (before[0] - fee.total, *before[1:])
            return Execution(
                sig, err, self.slot, fee=fee.total, replacement_blockhash=replacement,
                pre_balances=before, post_balances=after, loaded_data_size=loaded, **meta,
            )  # fmt: skip
        post = dict(res.post_accounts())
        index = rent_violation(tx.message, pre, post, fee, self.minimum_balance)
        return Execution(
            sig,
            rent_error(index) if index is not None else None,
            self.slot,
            fee=fee.total,
            post_accounts=post,
            replacement_blockhash=replacement,
            pre_balances=before,
            post_balances=tuple(
                post[k].lamports if k in post else b for k, b in zip(keys, before, strict=True)
            ),
            loaded_data_size=loaded,
            **meta_fields(res.meta()),
        )

    def process(self, tx: VersionedTransaction) -> Execution:
        """Execute and commit ``tx`` as a leader would (module docstring)."""
        self.sync()
        if not tx.signatures:
            return Execution(Signature.default(), "MissingSignatureForFee", self.slot)
        sig = tx.signatures[0]
        try:
            tx.sanitize()
        except Exception:
            return Execution(sig, "SanitizeFailure", self.slot)
        if not all(tx.verify_with_results()):
            return Execution(sig, "SignatureFailure", self.slot)
        err, fee = self._precheck(tx, MAX_PROCESSING_AGE)
        if err is not None:
            return Execution(sig, err, self.slot)
        msg = tx.message
        keys = list(dict.fromkeys(msg.account_keys))
        payer = msg.account_keys[0]
        pre = self._snapshot(keys)
        err, meta = self._execute(tx, pre, fee)
        before = pre[payer]
        committed = err is None or (
            before is not None and self.balance(payer) <= before.lamports - fee.base
        )
        if not committed:
            return Execution(sig, err, self.slot, **meta)
        if fee.prioritization:
            self._charge(payer, fee.prioritization)
        record = self._record(tx, err, meta, fee, pre)
        self.history.add(record, protect_from=self.slot - MAX_PROCESSING_AGE)
        for key in keys:
            if key in self.watched:
                after = self.get_account(key)
                if _changed(pre[key], after):
                    self._emit(self.account_listeners, self.slot, key, after)
        self._emit(self.tx_listeners, record)
        return Execution(sig, err, self.slot, fee=fee.total, committed=True, **meta)

    def _execute(
        self, tx: VersionedTransaction, pre: Mapping[Pubkey, Account | None], fee: FeeDetails
    ) -> tuple[TxErr, dict[str, Any]]:
        """Run ``tx`` through LiteSVM: its error (``None`` if it succeeded) and its metadata.

        Simulated first: the rent rule must see the post-state before anything is committed, and
        LiteSVM cannot roll a committed transaction back. A rent violation commits the base fee
        only (charged here); a failed execution is left to LiteSVM, which commits the fee only,
        as a bank does (unless the failure was in loading, which leaves the payer untouched:
        then nothing is committed)."""
        sim = self.svm.simulate_transaction(tx)
        if not isinstance(sim, FailedTransactionMetadata):
            post = dict(sim.post_accounts())
            index = rent_violation(tx.message, pre, post, fee, self.minimum_balance)
            if index is not None:
                self._charge(tx.message.account_keys[0], fee.base)
                return rent_error(index), meta_fields(sim.meta())
        res = self.svm.send_transaction(tx)
        if isinstance(res, FailedTransactionMetadata):
            return failure(res)
        return None, meta_fields(res)

    def _record(
        self,
        tx: VersionedTransaction,
        err: TxErr,
        meta: dict[str, Any],
        fee: FeeDetails,
        pre: Mapping[Pubkey, Account | None],
    ) -> TxRecord:
        """The committed transaction as ``getTransaction`` reports it (balances before and
        after, in the message's account order)."""
        msg = tx.message
        slot, index = self._slot_count
        self._slot_count = (self.slot, index + 1 if slot == self.slot else 1)
        return TxRecord(
            index=index if slot == self.slot else 0,
            signature=tx.signatures[0],
            slot=self.slot,
            block_time=self.unix_timestamp,
            wire=bytes(tx),
            legacy=not isinstance(msg, MessageV0),
            err=err,
            logs=meta["logs"],
            compute_units=meta["units"],
            fee=fee.total,
            pre_balances=tuple(
                a.lamports if (a := pre[k]) is not None else 0 for k in msg.account_keys
            ),
            post_balances=tuple(self.balance(k) for k in msg.account_keys),
            inner_instructions=meta["inner_instructions"],
            return_data=meta["return_data"],
        )

    def transaction(self, signature: Signature) -> TxRecord | None:
        return self.history.get(signature)

    def airdrop(self, to: Pubkey, lamports: int) -> Execution:
        """A transfer from the faucet, committed like any transaction."""
        self.sync()
        self._airdrops += 1
        # Two equal requests within one slot would be one transaction (AlreadyProcessed); a
        # compute unit limit that differs per request keeps them distinct.
        limit = MAX_COMPUTE_UNIT_LIMIT - self._airdrops % 1_000_000
        ixs = [
            set_compute_unit_limit(limit),
            transfer(
                TransferParams(from_pubkey=self.faucet.pubkey(), to_pubkey=to, lamports=lamports)
            ),
        ]
        msg = Message.new_with_blockhash(ixs, self.faucet.pubkey(), self.blockhashes.latest)
        return self.process(VersionedTransaction(msg, [self.faucet]))

    # --- listeners ------------------------------------------------------------------------------

    @staticmethod
    def _emit(listeners: list[Callable[..., None]], *args: Any) -> None:
        for listener in list(listeners):
            try:
                listener(*args)
            except Exception:  # a subscriber's bug must not break the chain
                log.exception("chain listener failed")
