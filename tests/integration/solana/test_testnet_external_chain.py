"""``psyche-solana-local-testnet start --rpc URL`` (what scripts/localnet.sh runs against a
solana-test-validator) funds its wallets through the chain's faucet: checked on the local SVM,
which serves ``requestAirdrop`` as a validator does."""

from __future__ import annotations

from solders.keypair import Keypair

from psyche.localsvm import LocalSvmThread
from psyche.testnet.solana_chain import request_airdrop


def test_wallets_are_funded_by_request_airdrop(local_svm: LocalSvmThread) -> None:
    key = Keypair().pubkey()
    request_airdrop(local_svm.url, str(key), 3 * 10**9)
    account = local_svm.get_account(key)
    assert account is not None and account.lamports == 3 * 10**9
