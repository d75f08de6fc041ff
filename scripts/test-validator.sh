#!/usr/bin/env bash
# The Solana tests against a real validator (issue 41): agave's solana-test-validator, built once
# by scripts/validator.sh (about an hour of CPU the first time, then cached under
# ~/.cache/psyche/validator), with the four SBF programs loaded at their ids. Not part of
# scripts/test.sh / .ci/run: the cold build does not fit beside CI in its 60 minutes.
#
# What runs, each on its own validator (PSYCHE_TEST_CHAIN=validator picks it; the same tests run
# on the local SVM in the default suite):
#   tests/validator/test_rpc_differential.py     every RPC method and subscription the project
#                                                calls, local SVM vs validator, field by field
#   tests/validator/test_testnet_on_validator.py psyche-solana-local-testnet --validator real:
#                                                3 clients, one killed and rejoining, 2 epochs
#   tests/validator/test_reconnect.py            the validator stops and comes back: the
#                                                client's account subscription resubscribes
#   tests/validator/test_expiry.py               a lost transaction is signed anew when its
#                                                blockhash expires, and lands once
#   tests/validator/test_sender_on_validator.py  the priority fee the validator charges; a
#                                                confirmation missed while in flight: sent once
#   tests/validator/test_rate_limit_on_validator.py  a transfer through a proxy answering every
#                                                third call HTTP 429: waited out, lands once
#   tests/e2e/test_solana_rewards.py             a Treasurer run, claims, a Mining Pool, the
#                                                explorer's pool page in Chromium
#   tests/e2e/test_solana_local_testnet.py       the SparseLoCo Solana run
#   tests/docs/test_solana_documented.py         the run creator's and the lenders' documented
#                                                commands verbatim (not the README rewards scene:
#                                                it moves the local SVM's clock ahead)
# usage: scripts/test-validator.sh [pytest args]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
t0=$SECONDS
bash scripts/setup.sh
bash scripts/system-deps.sh
bin="$(bash scripts/validator.sh)"
echo "== validator: $bin ($("$bin" --version 2>/dev/null || echo '?'))"
bash scripts/build-sbf.sh
export PATH="$root/.venv/bin:$PATH" PSYCHE_TEST_CHAIN=validator PSYCHE_VALIDATOR_BIN="$bin"
set +e
pytest tests/validator tests/e2e/test_solana_rewards.py tests/e2e/test_solana_local_testnet.py \
  tests/docs/test_solana_documented.py -k "not test_rewards_in_the_readme" "$@"
rc=$?
set -e
echo "== scripts/test-validator.sh: rc $rc in $((SECONDS - t0)) s"
exit $rc
