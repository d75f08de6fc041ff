"""The largest witness must fit one Solana transaction (1232 bytes).

The transaction is built the way the client sends it: the ``witness`` instruction from the IDL by
:class:`RunInstructions` (the accounts, signer flags and borsh arguments the program declares),
the compute-unit limit the session's :class:`ComputeBudget` prepends, and a message paid and signed
by the wallet as :class:`TxSender` signs it; solders serializes it, so signature, account keys,
blockhash and compact-array headers are all counted.
"""

from __future__ import annotations

import pytest
from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from psyche.coordinator.types import MAX_EVALS, EvalResult, Verdict, Witness, WitnessMetadata
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.coordinator_config import RUN_ID_MAX_LEN
from psyche.solana.budget import ComputeBudget
from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import (
    ProgramClient,
    RunAccounts,
    RunInstructions,
    default_idl_dir,
    instance_pda,
)

SOLANA_PACKET_DATA_SIZE = 1232
# A ComputeBudget SetComputeUnitPrice instruction (program id key, header, 9 data bytes) is about
# this big; an operator may add one for priority fees.
PRIORITY_FEE_ROOM = 45


@pytest.fixture(scope="module")
def programs() -> tuple[ProgramClient, ProgramClient]:
    idl = default_idl_dir()
    return (
        ProgramClient(IdlCodec.load(idl / "psyche_coordinator.json")),
        ProgramClient(IdlCodec.load(idl / "psyche_authorizer.json")),
    )


def largest_witness() -> tuple[Witness, WitnessMetadata]:
    full = Bloom(2**64 - 1, [2**64 - 1] * Bloom.WORDS)
    proof = WitnessProof(position=2**64 - 1, index=2**64 - 1, witness=True)
    w = Witness(proof, full, full, Verdict(checked=0xFFFF, mismatch=0xFFFF))
    m = WitnessMetadata(
        step=2**32 - 1,
        tokens_per_sec=1e9,
        bandwidth_per_sec=1e9,
        loss=float("nan"),
        efficiency=1.0,
        evals=tuple(EvalResult(task=i, value=0.5) for i in range(MAX_EVALS)),
    )
    return w, m


def witness_transaction(programs: tuple[ProgramClient, ProgramClient]) -> Transaction:
    coordinator, _ = programs
    wallet = Keypair()
    run_id = "r" * RUN_ID_MAX_LEN
    run = RunAccounts(instance_pda(coordinator.program_id, run_id), Pubkey.new_unique())
    ix = RunInstructions(coordinator, run).witness(wallet.pubkey(), *largest_witness())
    ixs = ComputeBudget(programs)([ix])
    blockhash = Hash.new_unique()
    return Transaction(
        [wallet], Message.new_with_blockhash(ixs, wallet.pubkey(), blockhash), blockhash
    )


def test_witness_instruction_data_is_the_compact_layout(
    programs: tuple[ProgramClient, ProgramClient],
) -> None:
    coordinator, _ = programs
    user = Pubkey.new_unique()
    run = RunAccounts(Pubkey.new_unique(), Pubkey.new_unique())
    ix = RunInstructions(coordinator, run).witness(user, *largest_witness())
    # discriminator · proof (u64, u64, bool) · two blooms (seed + 48 words) · verdict (two u16) ·
    # metadata (step, four f32, a u32 length and (u8, f32) per eval)
    assert len(ix.data) == 8 + 17 + 2 * 392 + 4 + 20 + 4 + MAX_EVALS * 5
    # The wallet is the only signer, so the transaction carries one signature.
    assert [a.pubkey for a in ix.accounts if a.is_signer] == [user]
    assert {a.pubkey for a in ix.accounts} >= {user, run.instance, run.account}


def test_largest_witness_transaction_fits_one_packet(
    programs: tuple[ProgramClient, ProgramClient],
) -> None:
    tx = witness_transaction(programs)
    assert len(tx.message.instructions) == 2  # the compute-unit limit, then the witness
    size = len(bytes(tx))
    assert size <= SOLANA_PACKET_DATA_SIZE, f"witness transaction is {size} bytes"
    assert SOLANA_PACKET_DATA_SIZE - size >= PRIORITY_FEE_ROOM, size
