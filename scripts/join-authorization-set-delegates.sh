#!/usr/bin/env bash
# As a grantee, replace the delegate wallets that may join in your place (SPEC §9.3, §9.5).
#   scripts/join-authorization-set-delegates.sh JOIN_AUTHORITY [DELEGATE ...]
# Clears the current delegates, then adds the given ones (none given: just clears). Needs RPC and
# WALLET_PRIVATE_KEY_PATH (or RAW_WALLET_PRIVATE_KEY) in the environment.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${PSYCHE_SOLANA_CLIENT:-$root/.venv/bin/psyche-solana-client}"
if [ $# -lt 1 ]; then
  echo "usage: $0 JOIN_AUTHORITY [DELEGATE ...]" >&2
  exit 2
fi
authority="$1"; shift
args=(--join-authority "$authority" --delegates-clear)
for d in "$@"; do args+=(--delegates-added "$d"); done
exec "$bin" join-authorization-delegate "${args[@]}"
