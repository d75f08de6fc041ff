"""The largest witness must fit one Solana transaction (1232 bytes) with a compute-budget
instruction. Built as a real legacy transaction with solders, so accounts, signature, blockhash
and compact-array headers are all counted."""

from __future__ import annotations

from solders.compute_budget import set_compute_unit_limit
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from psyche.coordinator.types import EvalResult, Witness, WitnessMetadata
from psyche.coordinator.wire import ANCHOR_DISCRIMINATOR_LEN, encode_witness_args
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof

SOLANA_PACKET_DATA_SIZE = 1232


def largest_witness() -> tuple[Witness, WitnessMetadata]:
    full = Bloom(2**64 - 1, [2**64 - 1] * Bloom.WORDS)
    w = Witness(WitnessProof(position=2**64 - 1, index=2**64 - 1, witness=True), full, full)
    m = WitnessMetadata(
        step=2**32 - 1,
        tokens_per_sec=1e9,
        bandwidth_per_sec=1e9,
        loss=float("nan"),
        efficiency=1.0,
        evals=tuple(EvalResult(task=i, value=0.5) for i in range(8)),
    )
    return w, m


def test_witness_args_layout_size() -> None:
    w, m = largest_witness()
    data = encode_witness_args(w, m)
    assert len(data) == 17 + 2 * 392 + 20 + 4 + 8 * 5


def test_largest_witness_transaction_fits_one_packet() -> None:
    w, m = largest_witness()
    data = bytes(ANCHOR_DISCRIMINATOR_LEN) + encode_witness_args(w, m)
    program = Pubkey.new_unique()
    user = Keypair()
    accounts = [
        AccountMeta(user.pubkey(), is_signer=True, is_writable=True),
        AccountMeta(Pubkey.new_unique(), is_signer=False, is_writable=False),  # instance PDA
        AccountMeta(Pubkey.new_unique(), is_signer=False, is_writable=True),  # coordinator acct
    ]
    ixs = [set_compute_unit_limit(400_000), Instruction(program, data, accounts)]
    msg = Message.new_with_blockhash(ixs, user.pubkey(), Hash.new_unique())
    tx = Transaction([user], msg, Hash.new_unique())
    size = len(bytes(tx))
    assert size <= SOLANA_PACKET_DATA_SIZE, f"witness transaction is {size} bytes"
    # Leave room for a priority-fee instruction too (another ~45 bytes).
    assert SOLANA_PACKET_DATA_SIZE - size >= 45, size
