# Sourced by the join-authorization scripts (POSIX sh): sets $client to the project's
# psyche-solana-client: $PSYCHE_SOLANA_CLIENT, else the checkout's .venv, else the one on PATH.
# Expects $here to be the scripts/ directory.
if [ -n "${PSYCHE_SOLANA_CLIENT:-}" ]; then
  client=$PSYCHE_SOLANA_CLIENT
elif [ -x "$here/../.venv/bin/psyche-solana-client" ]; then
  client=$here/../.venv/bin/psyche-solana-client
elif command -v psyche-solana-client >/dev/null 2>&1; then
  client=psyche-solana-client
else
  echo "$0: psyche-solana-client not found (set PSYCHE_SOLANA_CLIENT)" >&2
  exit 127
fi
