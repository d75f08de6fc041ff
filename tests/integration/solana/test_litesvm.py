"""The backend's instructions run by the real SVM (``solders.litesvm``) on the SBF build.

Needs ``target/deploy/psyche_coordinator.so`` and ``psyche_authorizer.so``, which
``scripts/build-sbf.sh`` makes (``scripts/test.sh`` runs it first). Without them the test fails
and says so: a skipped SVM test would hide that the programs were never run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SO = ROOT / "target" / "deploy" / "psyche_coordinator.so"
AUTH_SO = ROOT / "target" / "deploy" / "psyche_authorizer.so"
IDL = ROOT / "idl" / "psyche_coordinator.json"


@pytest.fixture(autouse=True)
def _sbf_build() -> None:
    missing = [p.name for p in (SO, AUTH_SO) if not p.is_file()]
    if missing:
        pytest.fail(f"no SBF build ({', '.join(missing)}): run scripts/build-sbf.sh")


def test_create_run_then_read_it_back() -> None:
    from solders.keypair import Keypair
    from solders.litesvm import LiteSVM
    from solders.message import Message
    from solders.system_program import CreateAccountParams, create_account
    from solders.transaction import Transaction

    from psyche.coordinator import RunState
    from psyche.solana.idl import IdlCodec
    from psyche.solana.instructions import (
        ProgramClient,
        RunAccounts,
        RunInstructions,
        instance_pda,
    )
    from psyche.solana.layout import ACCOUNT_VERSION, CoordinatorLayout, fixed_str
    from psyche.solana.snapshot import AccountLayoutError

    program = ProgramClient(IdlCodec.load(IDL))
    layout = CoordinatorLayout(program.idl)
    svm = LiteSVM()
    svm.add_program(program.program_id, SO.read_bytes())
    payer, account = Keypair(), Keypair()
    svm.airdrop(payer.pubkey(), 10**10)
    run = RunAccounts(instance_pda(program.program_id, "svm"), account.pubkey())
    ixs = RunInstructions(program, run)
    create = create_account(
        CreateAccountParams(
            from_pubkey=payer.pubkey(),
            to_pubkey=account.pubkey(),
            lamports=svm.minimum_balance_for_rent_exemption(layout.size),
            space=layout.size,
            owner=program.program_id,
        )
    )
    init = ixs.init_coordinator(payer.pubkey(), payer.pubkey(), payer.pubkey(), "svm", "test")
    msg = Message.new_with_blockhash([create, init], payer.pubkey(), svm.latest_blockhash())
    res = svm.send_transaction(Transaction([payer, account], msg, svm.latest_blockhash()))
    assert not hasattr(res, "err"), res
    acc = svm.get_account(account.pubkey())
    assert acc is not None
    data = bytes(acc.data)
    raw = program.idl.decode_account("CoordinatorAccount", data)
    assert raw["version"] == ACCOUNT_VERSION and raw["nonce"] == 0
    state = raw["state"]["coordinator"]
    assert fixed_str(bytes(state["run_id"]["bytes"])) == "svm"
    assert state["run_state"] == RunState.Uninitialized.value
    # A created but unconfigured run has no model: the client says so instead of guessing one.
    with pytest.raises(AccountLayoutError, match="no model yet"):
        layout.decode_account(data)
