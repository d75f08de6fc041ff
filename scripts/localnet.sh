#!/usr/bin/env bash
# A Solana local testnet on a real validator: `anchor build`, `solana-test-validator` with both
# programs at their ids, then `psyche-solana-local-testnet start --rpc` against it (the run
# creator's documented commands, N joiners configured by env files; see README).
#   scripts/localnet.sh [N=3] [more psyche-solana-local-testnet flags]
# Needs the Solana CLI tools (solana, solana-test-validator) and anchor on PATH, and the Python
# environment (scripts/setup.sh). Where they cannot be had, `psyche-solana-local-testnet start`
# without --rpc runs the same flow on the local SVM (psyche-local-svm) instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
n="${1:-3}"
[ $# -gt 0 ] && shift
out="runs/localnet"
rpc="http://127.0.0.1:8899"
authorizer_id="F11W4iAJNnDaf7E2QmrRe5cxvPUEJ9gEux2DMrZGd4hU"
coordinator_id="9jg3qZJhRk3LRFtgFPCKAm9ZnGcYqG2cLPny5681vyff"
mkdir -p "$out"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT

anchor build
solana-test-validator --reset --quiet --ledger "$out/ledger" \
  --bpf-program "$authorizer_id" target/deploy/psyche_authorizer.so \
  --bpf-program "$coordinator_id" target/deploy/psyche_coordinator.so &
pid=$!
until solana -u "$rpc" cluster-version >/dev/null 2>&1; do sleep 1; done

"$root/.venv/bin/psyche-solana-local-testnet" start --rpc "$rpc" --num-clients "$n" \
  --out "$out" "$@"
