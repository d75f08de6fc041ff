#!/usr/bin/env bash
# Authorize joiners of the runs whose join authority is this wallet (SPEC §9.3, §9.5).
#   scripts/join-authorization-create.sh [GRANTEE]   # no GRANTEE: anyone may join (permissionless)
# Needs RPC and WALLET_PRIVATE_KEY_PATH (or RAW_WALLET_PRIVATE_KEY) in the environment; extra
# flags go through to `psyche-solana-client join-authorization-create`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${PSYCHE_SOLANA_CLIENT:-$root/.venv/bin/psyche-solana-client}"
args=()
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then args+=(--authorizer "$1"); shift; fi
exec "$bin" join-authorization-create "${args[@]}" "$@"
