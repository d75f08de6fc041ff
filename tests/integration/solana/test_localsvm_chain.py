"""The chain rules of the local SVM (``psyche.localsvm.chain``) on a fake clock: deterministic,
no sockets, no programs needed beyond the builtins."""

from __future__ import annotations

import math
import shutil
import subprocess

import pytest
from solders.account import Account
from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction

from psyche.localsvm.accounts import zstd_frame
from psyche.localsvm.chain import Chain
from psyche.localsvm.rent import RentKind, RentState, rent_state, transition_allowed

SOL = 10**9
SYSTEM_PROGRAM = Pubkey.from_string("11111111111111111111111111111111")
GENESIS = 1_700_000_000.9  # 0.1 s before a second boundary


class FakeTime:
    def __init__(self) -> None:
        self.t = GENESIS

    def __call__(self) -> float:
        return self.t


def chain() -> tuple[Chain, FakeTime]:
    clock = FakeTime()
    return Chain(now=clock), clock


def pay(
    c: Chain, payer: Keypair, lamports: int, bh: Hash | None = None, *extra: Instruction
) -> VersionedTransaction:
    ix = transfer(
        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=lamports)
    )
    blockhash = bh or c.latest_blockhash()[0]
    msg = Message.new_with_blockhash([*extra, ix], payer.pubkey(), blockhash)
    return VersionedTransaction(msg, [payer])


def funded(c: Chain, lamports: int = 10 * SOL) -> Keypair:
    kp = Keypair()
    assert c.airdrop(kp.pubkey(), lamports).err is None
    return kp


def test_slots_blockhashes_and_clock_follow_time() -> None:
    c, time = chain()
    assert c.slot == 0 and c.svm.get_clock().unix_timestamp == math.floor(GENESIS)
    first, last_valid = c.latest_blockhash()
    assert last_valid == 150
    time.t += 0.39
    assert c.sync() == 0 and c.latest_blockhash()[0] == first
    time.t += 0.02
    assert c.sync() == 1 and c.latest_blockhash()[0] != first
    time.t += 400.0
    assert c.sync() == 1001
    clock = c.svm.get_clock()
    assert clock.slot == 1001 and clock.unix_timestamp == math.floor(time.t)
    assert (clock.epoch, clock.leader_schedule_epoch) == (0, 1)
    # A wall clock stepped back holds the chain where it was.
    time.t -= 100
    assert c.sync() == 1001 and c.svm.get_clock().unix_timestamp == math.floor(time.t + 100)


def test_a_transaction_sees_the_current_second_between_slot_ticks() -> None:
    c, time = chain()
    payer = funded(c)
    time.t += 0.3  # the next second begins, the slot does not
    assert c.process(pay(c, payer, SOL)).err is None
    clock = c.svm.get_clock()
    assert clock.slot == 0 and clock.unix_timestamp == math.floor(GENESIS) + 1


def test_epochs_and_advance_hooks() -> None:
    c, _ = chain()
    assert c.advance_slots(432_000) == 432_000
    assert c.epoch == (1, 0, 432_000)
    clock = c.svm.get_clock()
    assert clock.epoch == 1 and clock.epoch_start_timestamp == math.floor(GENESIS + 172_800)
    before = c.slot
    assert c.advance_time(4.0) == before + 10


def test_blockhash_age_limits() -> None:
    c, _ = chain()
    payer = funded(c)
    old = c.latest_blockhash()[0]
    c.advance_slots(144)
    assert c.simulate(pay(c, payer, SOL, old)).err is None  # preflight: age <= 144
    c.advance_slots(1)
    assert c.simulate(pay(c, payer, SOL, old)).err == "BlockhashNotFound"
    c.advance_slots(5)
    assert c.is_blockhash_valid(old)
    assert c.process(pay(c, payer, SOL + 1, old)).committed  # a leader: age <= 150
    c.advance_slots(1)
    assert not c.is_blockhash_valid(old)
    ex = c.process(pay(c, payer, SOL + 2, old))
    assert ex.err == "BlockhashNotFound" and not ex.committed
    # getFeeForMessage still knows it (a bank's queue holds 300).
    assert c.fee_for_message(pay(c, payer, 1, old).message) == 5000
    c.advance_slots(150)
    assert c.fee_for_message(pay(c, payer, 1, old).message) is None


def test_duplicates_and_history() -> None:
    c, _ = chain()
    payer = funded(c)
    tx = pay(c, payer, SOL)
    first = c.process(tx)
    assert first.committed and first.err is None
    again = c.process(tx)
    assert again.err == "AlreadyProcessed" and not again.committed
    assert c.simulate(tx).err == "AlreadyProcessed"
    record = c.transaction(tx.signatures[0])
    assert record is not None and record.fee == 5000 and record.compute_units == 150
    assert record.pre_balances[0] - record.post_balances[0] == SOL + 5000


def test_equal_airdrops_in_one_slot_are_distinct_transactions() -> None:
    c, _ = chain()
    to = Keypair().pubkey()
    a, b = c.airdrop(to, SOL), c.airdrop(to, SOL)
    assert a.err is None and b.err is None and a.signature != b.signature
    assert c.balance(to) == 2 * SOL


def test_fee_payer_rules() -> None:
    c, _ = chain()
    nobody = Keypair()
    assert c.process(pay(c, nobody, 1)).err == "AccountNotFound"
    owned = Keypair()
    c.set_account(owned.pubkey(), Account(SOL, b"\0" * 8, Pubkey.new_unique()))
    assert c.process(pay(c, owned, 1)).err == "InvalidAccountForFee"
    poor = Keypair()  # rent-paying from genesis: no transfer could create it
    c.set_account(poor.pubkey(), Account(4999, b"", SYSTEM_PROGRAM))
    assert c.process(pay(c, poor, 1)).err == "InsufficientFundsForFee"
    # Rent-exempt before the fee, rent-paying after it: refused before execution.
    edge = funded(c, c.minimum_balance(0) + 4999)
    ex = c.process(pay(c, edge, 1))
    assert ex.err == {"InsufficientFundsForRent": {"account_index": 0}} and not ex.committed
    assert c.balance(edge.pubkey()) == c.minimum_balance(0) + 4999


def test_rent_rule_in_execution() -> None:
    c, _ = chain()
    payer = funded(c)
    # Leaving the payer rent-paying: committed as a failure, the fee alone charged.
    keep = 1000
    before = c.balance(payer.pubkey())
    ex = c.process(pay(c, payer, before - 5000 - keep))
    assert ex.err == {"InsufficientFundsForRent": {"account_index": 0}} and ex.committed
    assert c.balance(payer.pubkey()) == before - 5000
    # Emptying it entirely is fine.
    ex = c.process(pay(c, payer, before - 10_000))
    assert ex.err is None and c.get_account(payer.pubkey()) is None


def test_rent_state_transitions() -> None:
    def minimum(size: int) -> int:
        return 1000 + size

    assert rent_state(0, 5, minimum).kind is RentKind.UNINITIALIZED
    assert rent_state(1005, 5, minimum).kind is RentKind.RENT_EXEMPT
    paying = rent_state(10, 5, minimum)
    assert paying == RentState(RentKind.RENT_PAYING, 10, 5)
    exempt, empty = RentState(RentKind.RENT_EXEMPT), RentState(RentKind.UNINITIALIZED)
    assert transition_allowed(exempt, empty) and transition_allowed(paying, exempt)
    assert not transition_allowed(exempt, paying) and not transition_allowed(empty, paying)
    assert transition_allowed(paying, RentState(RentKind.RENT_PAYING, 9, 5))
    assert not transition_allowed(paying, RentState(RentKind.RENT_PAYING, 11, 5))
    assert not transition_allowed(paying, RentState(RentKind.RENT_PAYING, 9, 6))


def test_prioritization_fee_is_charged() -> None:
    c, _ = chain()
    payer = funded(c)
    budget = [set_compute_unit_limit(300_000), set_compute_unit_price(1_500_000)]
    tx = pay(c, payer, SOL, None, *budget)
    expected = 5000 + math.ceil(300_000 * 1_500_000 / 10**6)
    assert c.fee_for_message(tx.message) == expected
    before = c.balance(payer.pubkey())
    ex = c.process(tx)
    assert ex.err is None and ex.fee == expected
    assert c.balance(payer.pubkey()) == before - SOL - expected
    # Without a limit the default is 200k units per non-budget instruction.
    tx = pay(c, payer, SOL, None, set_compute_unit_price(10))
    assert c.fee_for_message(tx.message) == 5000 + 2


def test_zstd_frame_is_a_valid_zstd_stream() -> None:
    if shutil.which("zstd") is None:
        pytest.skip("no zstd binary")
    for data in (b"", b"abc", bytes(range(256)) * 1200):
        out = subprocess.run(
            ["zstd", "-dc"], input=zstd_frame(data), capture_output=True, check=True
        )
        assert out.stdout == data
