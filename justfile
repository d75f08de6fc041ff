# The user documentation's `just` recipes, each a thin call of this project's own commands
# (`just` comes from PyPI's rust-just, installed into .venv by scripts/setup.sh). `just` lists them.

bin := justfile_directory() / ".venv/bin"

# The long-running recipes `exec` their command: a signal to `just` (kill, a supervisor) then
# reaches the command itself, which stops cleanly, instead of the shell between them, which died
# and left the command running.

default:
    @{{ bin }}/just --list

# Centralized local testnet (server + clients): --num-clients N --config-path ./config/DIR
local-testnet *args='':
    exec {{ bin }}/psyche-centralized-local-testnet start {{ args }}

# (The documented `run_id=X` form reaches a recipe as the text "run_id=X": both forms work.)
# The local SVM holding both programs, the run created, configured (CONFIG_PATH, default
# config/tiny-solana) and resumed, and its clients started: one command, the chain lives in it.
# Solana localnet test run (local SVM, run RUN_ID, its clients)
setup-solana-localnet-test-run run_id="test" *args='':
    exec {{ bin }}/psyche-solana-local-testnet start \
        --run-id {{ trim_start_match(run_id, "run_id=") }} --config-path "${CONFIG_PATH:-config/tiny-solana}" {{ args }}

# RPC defaults to http://127.0.0.1:8899, WALLET_FILE to ~/.config/solana/id.json; the client
# reads AUTHORIZER (the grantee that named this wallet a delegate) itself.

# One more client joining RUN_ID on localnet
start-training-localnet-client run_id="test" *args='':
    exec {{ bin }}/psyche-solana-client train --rpc "${RPC:-http://127.0.0.1:8899}" \
        --run-id {{ trim_start_match(run_id, "run_id=") }} \
        --wallet-private-key-path "${WALLET_FILE:-$HOME/.config/solana/id.json}" {{ args }}

# Lint and type checks: ruff, mypy, cargo fmt and clippy
check:
    {{ bin }}/ruff check client tests bench scripts
    {{ bin }}/ruff format --check client tests bench scripts
    {{ bin }}/mypy
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Format Python and Rust sources.
fmt:
    {{ bin }}/ruff format client tests bench scripts
    cargo fmt --all
