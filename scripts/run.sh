#!/usr/bin/env bash
# Install, then run the default job: a local testnet (server + 3 client processes) training a
# tiny model made locally; writes runs/tiny-testnet/summary.json and summary.png.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
# --explorer: the run explorer follows the run; its URL (http://127.0.0.1:8080/ unless
# TESTNET_EXPLORER_PORT says otherwise) is printed once it listens.
exec "$root/.venv/bin/psyche-centralized-local-testnet" start --config-path config/tiny \
  --explorer "${TESTNET_EXPLORER_PORT:-8080}" "$@"
