#!/usr/bin/env bash
# From a fresh clone, the Solana local testnet in one command: install (scripts/setup.sh), build
# the four programs for SBF when target/deploy lacks one (scripts/build-sbf.sh: about 5 minutes
# the first time on 2 cores, seconds after), then `psyche-solana-local-testnet start` (a local SVM
# holding the programs, the run creator's flow, 3 clients of config/tiny-solana). Arguments go to
# `psyche-solana-local-testnet start` (e.g. --epochs 1, --num-clients 3, --explorer 8081).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
missing=()
for so in psyche_coordinator psyche_authorizer psyche_treasurer psyche_mining_pool; do
  [ -s "target/deploy/$so.so" ] || missing+=("$so")
done
if ((${#missing[@]})); then
  echo "[solana-testnet] building the SBF programs (${missing[*]} missing): scripts/build-sbf.sh," \
    "about 5 minutes the first time, seconds after" >&2
  bash scripts/build-sbf.sh
fi
exec "$root/.venv/bin/psyche-solana-local-testnet" start "$@"
