#!/usr/bin/env bash
# A local Solana testnet running the tiny run (config/tiny) with N clients on this machine.
#   scripts/localnet.sh [N=3]   # N >= 3 (config/tiny needs 3 to start); Ctrl-C stops everything;
#                               # logs and keys in runs/localnet/
# Needs the Solana CLI tools (solana, solana-keygen, solana-test-validator) and anchor on PATH,
# and the Python environment (scripts/setup.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
n="${1:-3}"
out="runs/localnet"
bin="$root/.venv/bin"
export RPC="http://127.0.0.1:8899"
export PSYCHE_AUTHORIZER_PROGRAM_ID="F11W4iAJNnDaf7E2QmrRe5cxvPUEJ9gEux2DMrZGd4hU"
export PSYCHE_COORDINATOR_PROGRAM_ID="9jg3qZJhRk3LRFtgFPCKAm9ZnGcYqG2cLPny5681vyff"
mkdir -p "$out"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

anchor build
solana-test-validator --reset --quiet --ledger "$out/ledger" \
  --bpf-program "$PSYCHE_AUTHORIZER_PROGRAM_ID" target/deploy/psyche_authorizer.so \
  --bpf-program "$PSYCHE_COORDINATOR_PROGRAM_ID" target/deploy/psyche_coordinator.so &
pids+=($!)
until solana -u "$RPC" cluster-version >/dev/null 2>&1; do sleep 1; done

wallet() {  # a funded keypair file per name
  [ -f "$out/$1.json" ] || solana-keygen new --silent --no-bip39-passphrase -o "$out/$1.json"
  solana -u "$RPC" airdrop 100 "$out/$1.json" >/dev/null
}
wallet owner
for i in $(seq 1 "$n"); do wallet "client$i"; done

# The tiny run's model and data (config/tiny/state.toml points at them), served on :20001.
[ -d runs/tiny/model ] || "$bin/psyche" model init --preset tiny --out runs/tiny/model
if [ ! -d runs/tiny/data ]; then
  "$bin/psyche" data synth --out runs/tiny/text --tokens 2000000
  "$bin/psyche" data prepare --text runs/tiny/text --out runs/tiny/data --seq-len 64 \
    --shuffle-seed 0
fi
"$bin/psyche" data serve --data-config config/tiny/data.toml --port 20001 >"$out/data.log" 2>&1 &
pids+=($!)

# The owner creates the run (it is also the join authority), opens it to everyone, configures
# it and starts it.
sc() { "$bin/psyche-solana-client" "$@"; }
owner=(--wallet-private-key-path "$out/owner.json")
sc create-run "${owner[@]}" --run-id tiny
sc join-authorization-create "${owner[@]}"
sc update-config "${owner[@]}" --run-id tiny --config-path config/tiny/state.toml
sc set-paused "${owner[@]}" --run-id tiny --resume

for i in $(seq 1 "$n"); do
  sc train --wallet-private-key-path "$out/client$i.json" --run-id tiny --device cpu \
    --logs console --event-log "$out/client$i.events" >"$out/client$i.log" 2>&1 &
  pids+=($!)
done
echo "localnet: validator on $RPC, $n clients training; logs in $out/ (Ctrl-C stops)"
wait
