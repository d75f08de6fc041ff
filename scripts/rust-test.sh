#!/usr/bin/env bash
# The Rust side of the test suite: formatting, clippy (warnings are errors), every cargo test of
# the workspace (pure core, programs through solana-program-test, vectors), and the IDL freshness
# check. Builds go to a target directory outside the clone, shared between runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/psyche/cargo-target}"
# solana-program-test logs every instruction at debug level unless told otherwise.
export RUST_LOG="${RUST_LOG:-error}"
echo "== cargo fmt";    cargo fmt --all --check
echo "== cargo clippy"; cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test";   cargo test --workspace "$@"
echo "== idl";          bash scripts/idl.sh --check
